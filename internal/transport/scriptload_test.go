package transport

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// TestScriptLoad sends 9 600 decisions on 2 000 keys to the Redis at
// RATELIMIT_SCRIPT_LOAD_ADDR in batches of 32 (RATELIMIT_SCRIPT_LOAD_BATCH:
// another divisor of 9 600), one call at a time: the fixed
// load scripts/script-cost.sh counts instructions of (redis-server under
// callgrind, a figure that does not move with the machine's load).
// RATELIMIT_SCRIPT_LOAD_ACROSS=1 sends each decision as AllowAll's of
// one check (a request across subjects, as an Envoy service's of one
// descriptor); =3 of three (as one of three descriptors: the key, its
// tenant of 200 and its route of 10). Skipped without the variable.
func TestScriptLoad(t *testing.T) {
	addr := os.Getenv("RATELIMIT_SCRIPT_LOAD_ADDR")
	if addr == "" {
		t.Skip("RATELIMIT_SCRIPT_LOAD_ADDR not set: run scripts/script-cost.sh")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1})
	defer c.Close()
	ctx := context.Background()
	s := New(c, defaultPrefix)
	// A day's limit: no bucket expires during the run, whatever its
	// speed, so every run decides the same.
	policies := []bucket.Policy{Limit{Rate: 1000, Period: 24 * time.Hour, Burst: 1000}.policy("p")}
	size := 32
	if v := os.Getenv("RATELIMIT_SCRIPT_LOAD_BATCH"); v != "" {
		size, _ = strconv.Atoi(v)
	}
	if size < 1 || 9600%size != 0 {
		t.Fatalf("RATELIMIT_SCRIPT_LOAD_BATCH=%q: want a divisor of 9600", os.Getenv("RATELIMIT_SCRIPT_LOAD_BATCH"))
	}
	across := os.Getenv("RATELIMIT_SCRIPT_LOAD_ACROSS") != ""
	three := os.Getenv("RATELIMIT_SCRIPT_LOAD_ACROSS") == "3"
	if three {
		policies = append(policies, policies[0], policies[0])
	}
	k := 0
	for range 9600 / size {
		batch := make([]*request, size)
		for j := range batch {
			subj := "k" + strconv.Itoa(k%2000)
			batch[j] = &request{ctx: ctx, Ask: bucket.Ask{Subj: subj, Op: bucket.OpTake, N: 1, Policies: policies}}
			if across {
				batch[j].N, batch[j].Across = 0, []bucket.Part{{Subj: subj, N: 1}}
			}
			if three {
				i := k % 2000
				batch[j].Each = make([]bucket.Outcome, 3)
				batch[j].Across = append(batch[j].Across, bucket.Part{Subj: "t" + strconv.Itoa(i/10), N: 1}, bucket.Part{Subj: "r" + strconv.Itoa(i%10), N: 1})
			}
			k++
		}
		s.send(ctx, "", batch)
		for _, r := range batch {
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
	}
}
