package core

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// The memory store's own tests, through limiters and the store's calls;
// its arithmetic and tables are internal/bucket's, tested there.

// TestMemoryConcurrentPolicies: limiters with different policy names share
// one store and one set of subjects across goroutines, with resets of
// other subjects and Len calls racing them (run with -race). Each limiter
// admits exactly its burst per subject: no decision used another name's
// memoized hash.
func TestMemoryConcurrentPolicies(t *testing.T) {
	t.Parallel()
	frozen := time.Now() // nothing refills
	s := NewMemoryStore(WithClock(func() time.Time { return frozen }), WithMaxKeys(1<<20))
	const (
		nLimiters = 6
		burst     = 20
		subjects  = 30
	)
	var lims []*Limiter
	for i := range nLimiters {
		lim := Limit{Rate: 1, Period: time.Hour, Burst: burst}
		cfg := Config{Store: s, Limit: lim, FailMode: FailClosed, Name: "lim-" + strconv.Itoa(i)}
		if i%3 == 2 {
			cfg.Extra = []NamedLimit{{Name: "extra-" + strconv.Itoa(i), Limit: PerHour(1000)}}
		}
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	ctx := context.Background()
	var allowed [nLimiters][subjects]int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			var local [nLimiters][subjects]int64
			for range 3000 {
				li, si := rng.IntN(nLimiters), rng.IntN(subjects)
				r, err := lims[li].Allow(ctx, "subject-"+strconv.Itoa(si))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					local[li][si]++
				}
			}
			mu.Lock()
			for i := range local {
				for j := range local[i] {
					allowed[i][j] += local[i][j]
				}
			}
			mu.Unlock()
		}()
	}
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sub := "other-" + strconv.Itoa(i%50)
			lims[i%nLimiters].Allow(ctx, sub)
			if err := lims[(i+1)%nLimiters].Reset(ctx, sub); err != nil {
				t.Error(err)
			}
			_ = s.Len()
		}
	}()
	wg.Wait()
	close(stop)
	churn.Wait()
	for i := range allowed {
		for j := range allowed[i] {
			if allowed[i][j] != burst {
				t.Errorf("limiter %d, subject %d: %d admitted, want exactly %d", i, j, allowed[i][j], burst)
			}
		}
	}
}

// TestTakeRejectsPoliciesNewRefuses: a Policy built by hand with numbers
// New would refuse (beyond 2^53, where the arithmetic stops being exact and
// can overflow) is refused by both stores before any arithmetic.
func TestTakeRejectsPoliciesNewRefuses(t *testing.T) {
	t.Parallel()
	type taker interface {
		Take(ctx context.Context, subject string, n int, policies []Policy, each []Outcome) (Outcome, error)
	}
	stores := map[string]taker{
		"memory": NewMemoryStore(),
		// Never dialed: the request is refused first.
		"redis": NewRedisStore(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})),
	}
	bad := []Policy{
		{Name: "p", Capacity: math.MaxInt64 / 2, Refill: math.MaxInt64 / 4, Unit: 1, Tick: 1},
		{Name: "p", Capacity: 10, Refill: math.MaxInt64, Unit: 1, Tick: 1},
		{Name: "p", Capacity: bucket.MaxExact, Refill: 1, Unit: 1, Tick: 1},
		{Name: "p", Capacity: 10, Refill: 0, Unit: 1, Tick: 1},
		{Name: "p", Capacity: 10, Refill: 1, Unit: 0, Tick: 1},
		{Name: "p", Capacity: 10, Refill: 1, Unit: 1, Tick: 0},
		{Name: "p", Capacity: bucket.MaxExact / 2, Refill: 1, Unit: 1, Tick: 1000},
	}
	good := Policy{Name: "p", Capacity: bucket.MaxExact - 1, Refill: 1, Unit: 1, Tick: 1}
	for name, s := range stores {
		for _, p := range bad {
			if _, err := s.Take(context.Background(), "k", 1, []Policy{p}, nil); !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("%s: %+v: got %v, want ErrInvalidLimit", name, p, err)
			}
		}
		if name == "memory" {
			if o, err := s.Take(context.Background(), "k", 1, []Policy{good}, nil); err != nil || !o.Allowed {
				t.Errorf("%s: %+v: got %+v %v, want allowed", name, good, o, err)
			}
		}
	}
}
