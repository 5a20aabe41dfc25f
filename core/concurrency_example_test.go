package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/ratelimit/core"
)

// Two exports at once per customer: a third waits for a slot. A stream
// that may outlive Lease keeps its slot with KeepAlive.
func ExampleConcurrency() {
	exports, err := core.NewConcurrency(core.ConcurrencyConfig{
		Store:    core.NewMemoryStore(), // NewRedisStore to share the limit across instances
		Name:     "exports",
		Max:      2,
		Lease:    30 * time.Second,
		FailMode: core.FailClosed,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _, _ := exports.Acquire(ctx, "customer-1")
	first.KeepAlive()
	second, _, _ := exports.Acquire(ctx, "customer-1")
	third, res, _ := exports.Acquire(ctx, "customer-1")
	fmt.Println(third == nil, res.Remaining, res.RetryAfter <= 30*time.Second)

	_ = first.Release(ctx)
	third, res, _ = exports.Acquire(ctx, "customer-1")
	fmt.Println(third != nil, res.Remaining)
	_ = second.Release(ctx)
	_ = third.Release(ctx)
	// Output:
	// true 0 true
	// true 0
}
