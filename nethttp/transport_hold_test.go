package nethttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/nethttp"
)

// Requests a Transport booked before it learnt of an upstream's pause
// are held until the pause ends (issue 44: 7 of them reached the
// upstream inside its 2 s Retry-After, from the very process that got
// the 429), or fail as a wait too long when it ends past MaxWait.
func TestTransportHoldsBookingsThroughPause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pause   string
		wantErr error
	}{
		{"held", "2", nil},
		{"too long", "10", core.ErrWaitTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			var mu sync.Mutex
			var got []time.Time // when the upstream saw each request after the first
			first := true
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				isFirst := first
				first = false
				if !isFirst {
					got = append(got, time.Now())
				}
				mu.Unlock()
				if isFirst {
					close(arrived)
					<-release
					w.Header().Set("Retry-After", tc.pause)
					w.WriteHeader(http.StatusTooManyRequests)
				}
			}))
			defer api.Close()
			l, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), FailMode: core.FailClosed, MaxWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: nethttp.Transport(l, nil)}
			get := func() error {
				resp, err := client.Get(api.URL)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return err
			}
			firstDone := make(chan error, 1)
			go func() { firstDone <- get() }() // the burst: sent at once, answered late
			<-arrived
			var booked sync.WaitGroup
			errs := make(chan error, 2)
			for range 2 { // booked 1 s and 2 s ahead, before the pause is known
				booked.Go(func() { errs <- get() })
			}
			host := api.Listener.Addr().String()
			for {
				if res, _ := l.Peek(context.Background(), host, 1); res.RetryAfter > 2*time.Second {
					break
				}
				time.Sleep(time.Millisecond)
			}
			before := time.Now()
			close(release)
			if err := <-firstDone; err != nil {
				t.Fatal(err)
			}
			booked.Wait()
			close(errs)
			for err := range errs {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("a booked request: %v, want %v", err, tc.wantErr)
				}
			}
			pause, _ := time.ParseDuration(tc.pause + "s")
			mu.Lock()
			defer mu.Unlock()
			for _, at := range got {
				if at.Before(before.Add(pause)) {
					t.Errorf("the upstream got a request %v into its %v pause", at.Sub(before), pause)
				}
			}
			if tc.wantErr != nil && len(got) != 0 {
				t.Errorf("the upstream got %d requests, want none", len(got))
			}
		})
	}
}
