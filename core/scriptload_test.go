package core

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestScriptLoad sends 300 batches of 32 decisions on 2 000 keys to the
// Redis at RATELIMIT_SCRIPT_LOAD_ADDR, one call at a time: the fixed
// load scripts/script-cost.sh counts instructions of (redis-server under
// callgrind, a figure that does not move with the machine's load).
// Skipped without the variable.
func TestScriptLoad(t *testing.T) {
	addr := os.Getenv("RATELIMIT_SCRIPT_LOAD_ADDR")
	if addr == "" {
		t.Skip("RATELIMIT_SCRIPT_LOAD_ADDR not set: run scripts/script-cost.sh")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1})
	defer c.Close()
	ctx := context.Background()
	s := NewRedisStore(c)
	policies := []Policy{PerSecond(1000).policy("p")}
	k := 0
	for range 300 {
		batch := make([]*request, 32)
		for j := range batch {
			batch[j] = &request{ctx: ctx, subj: "k" + strconv.Itoa(k%2000), op: opTake, n: 1, policies: policies}
			k++
		}
		s.send(ctx, batch)
		for _, r := range batch {
			if r.err != nil {
				t.Fatal(r.err)
			}
		}
	}
}
