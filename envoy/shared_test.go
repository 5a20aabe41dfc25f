package envoy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/redistest"
	"github.com/sluicehq/ratelimit/nethttp"
)

// The mesh (this service) and an app's net/http middleware enforce one
// limit together on one Redis, through the documented mapping: rule key
// "api.user" is the policy Name, the descriptor's value the key.
func TestMeshAndMiddlewareShareOneLimit(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	newStore := func() *core.RedisStore { // one client each: two processes
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return core.NewRedisStore(c, core.WithPrefix(prefix))
	}
	s := newTestService(t, ServiceConfig{Store: newStore()}, serviceYAML)

	app, err := core.New(core.Config{
		Store: newStore(), Name: "api.user", Limit: core.PerMinute(5),
		FailMode: core.FailClosed, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttp.Middleware(app, nethttp.WithKey(func(r *http.Request) (string, error) {
		return r.Header.Get("X-User"), nil
	}))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	call := func() int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", "u1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}

	for i := 0; i < 3; i++ {
		if a := ask(t, s, req(d("user", "u1"))); a.code != ok {
			t.Fatalf("mesh request %d: %v", i+1, a.code)
		}
	}
	for i := 0; i < 2; i++ {
		if c := call(); c != http.StatusOK {
			t.Fatalf("app request %d: %d", i+1, c)
		}
	}
	if c := call(); c != http.StatusTooManyRequests {
		t.Errorf("app request 3: %d, want 429: the mesh took 3 of the 5", c)
	}
	if a := ask(t, s, req(d("user", "u1"))); a.code != over {
		t.Errorf("mesh request 4: %v, want OVER_LIMIT: the app took 2 of the 5", a.code)
	}
}
