package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"time"

	"github.com/sluicehq/ratelimit/bench"
)

func overAdmission(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	// ratelimit as configured for the run, then, unless that is already
	// the default, once more with its default 50ms Timeout: on a starved
	// machine it and the breaker turn stalls into FailMode decisions.
	peers := slices.Clone(bench.RedisPeers)
	peers[0].Name = "ratelimit, Timeout " + timeoutText(c.timeout)
	if c.timeout != 0 {
		peers = append(peers, ratelimitPeer("ratelimit, Timeout "+timeoutText(0), func(e *bench.Env) { e.Timeout = 0 }))
	}
	fmt.Fprintf(out, "\n### Over-admission: instances hammering one key\n\n")
	if err := admissionMatrix(ctx, out, c, r, peers, c.oaInstance, "oa"); err != nil {
		return err
	}
	return inFlightAdmission(ctx, out, c, r)
}

// admissionMatrix runs peers at each count of instances on one key, tight
// limit, c.oaRounds rounds (order reversed every other one), and prints
// the worst round of each as a table, its legend first. Keys start with
// tag.
func admissionMatrix(ctx context.Context, out io.Writer, c config, r *bench.Runner, peers []bench.Peer, instances []int, tag string) error {
	type key struct {
		peer string
		n    int
	}
	worst := map[key]bench.Admission{}
	for round := range c.oaRounds {
		order := slices.Clone(peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range instances {
			for _, p := range order {
				prefix := fmt.Sprintf("%s:%d:%d:%d:%s:", tag, time.Now().UnixNano(), round, n, sanitize(p.Name))
				a, err := r.OverAdmission(ctx, p, tight, n, c.oaPer, c.oaWindow, c.oaPause, prefix)
				if err != nil {
					return fmt.Errorf("%s × %d: %w", p.Name, n, err)
				}
				log.Printf("over-admission round %d %-16s ×%-2d admitted %d bound %d worst window over %d errors %d", round+1, p.Name, n, a.Admitted, a.Bound, a.WindowOver, a.Errors)
				k := key{p.Name, n}
				if w, ok := worst[k]; !ok || max(a.Over(), a.WindowOver) > max(w.Over(), w.WindowOver) ||
					(max(a.Over(), a.WindowOver) == max(w.Over(), w.WindowOver) && a.Errors > w.Errors) {
					worst[k] = a
				}
			}
		}
	}
	loop := "in a closed loop"
	if c.oaPause > 0 {
		loop = fmt.Sprintf("pausing %v between requests", c.oaPause)
	}
	fmt.Fprintf(out, "Limit 100 per 10 s, burst 100; each instance its own client and limiter, %d goroutines each %s, for %v; ratelimit with FailClosed, its Timeout %s unless the row's name says otherwise. ", c.oaPer, loop, c.oaWindow, timeoutText(c.timeout))
	fmt.Fprintf(out, "Cell: admitted / exact bound C + R·Δ (Δ from the first request sent to the last answer), then requests over the bound; the worst window: the most admissions any interval [a, b] held beyond its own C + R·(b−a), over every a a request was sent and b an answer came (counting the admissions sent and answered inside it), and how many intervals that checked; errors (an error admits nothing), decisions asked and Redis round trips they took; ratelimit's admissions from borrowed slices (Config.Borrow). Worst of %d round(s).\n\n", c.oaRounds)
	fmt.Fprint(out, "| library |")
	for _, n := range instances {
		fmt.Fprintf(out, " %d instance(s) |", n)
	}
	fmt.Fprint(out, "\n|---|")
	for range instances {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out)
	var notes []string
	for _, p := range peers {
		fmt.Fprintf(out, "| %s |", p.Name)
		for _, n := range instances {
			a := worst[key{p.Name, n}]
			fmt.Fprintf(out, " %d / %d, over **%d**; worst window over **%d** of %d; errors %d; %d decisions, %d round trips; %d from slices |",
				a.Admitted, a.Bound, a.Over(), a.WindowOver, a.Windows, a.Errors, a.Decisions, a.Trips, a.Borrowed)
			if a.FirstErr != nil && len(notes) < 12 {
				notes = append(notes, fmt.Sprintf("%s × %d: %v", p.Name, n, a.FirstErr))
			}
		}
		fmt.Fprintln(out)
	}
	if len(notes) > 0 {
		fmt.Fprintf(out, "\nFirst errors seen:\n\n")
		for _, n := range notes {
			fmt.Fprintf(out, "- %s\n", n)
		}
	}
	return nil
}

// inFlightAdmission is the in-flight limit's row: instances of
// nethttp.Concurrency on one key, Max inFlightMax, their handlers
// counting the requests inside them.
func inFlightAdmission(ctx context.Context, out io.Writer, c config, r *bench.Runner) error {
	const inFlightMax, hold = 4, time.Millisecond
	worst := map[int]bench.InFlight{}
	for round := range c.oaRounds {
		for _, n := range c.oaInstance {
			prefix := fmt.Sprintf("if:%d:%d:%d:", time.Now().UnixNano(), round, n)
			f, err := r.InFlight(ctx, n, c.oaPer, inFlightMax, c.oaWindow, hold, prefix)
			if err != nil {
				return fmt.Errorf("in-flight × %d: %w", n, err)
			}
			log.Printf("in-flight round %d ×%-2d peak %d of %d, %d requests, %d admitted, %d errors", round+1, n, f.Peak, f.Max, f.Requests, f.Admitted, f.Errors)
			if w, ok := worst[n]; !ok || f.Peak > w.Peak || (f.Peak == w.Peak && f.Errors > w.Errors) {
				worst[n] = f
			}
		}
	}
	fmt.Fprintf(out, "\nIn-flight limit (core.Concurrency through nethttp.Concurrency), Max %d on one key; each instance its own client, %d goroutines each in a closed loop for %v, the handler holding its slot %v; FailClosed, Timeout %s. ", inFlightMax, c.oaPer, c.oaWindow, hold, timeoutText(c.timeout))
	fmt.Fprintf(out, "Cell: most requests inside handlers at once (a shared counter) / Max, over by; requests, admitted, errors (503s); client round trips per request; Redis script calls + releases per request (commandstats: evalsha, eval, zrem; one acquire call carries the acquires of an instance's requests on the key that arrived while its last call was in flight), Redis commands per request (those inside scripts included). Worst of %d round(s).\n\n", c.oaRounds)
	fmt.Fprint(out, "| limit |")
	for _, n := range c.oaInstance {
		fmt.Fprintf(out, " %d instance(s) |", n)
	}
	fmt.Fprint(out, "\n|---|")
	for range c.oaInstance {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprint(out, "\n| ratelimit in-flight |")
	for _, n := range c.oaInstance {
		f := worst[n]
		fmt.Fprintf(out, " %d / %d, over **%d**; %d requests, %d admitted, errors %d; %.2f trips/request; %.2f scripts/request; %.1f commands/request |",
			f.Peak, f.Max, f.Over(), f.Requests, f.Admitted, f.Errors, f.TripsPerRequest(), f.ScriptsPerRequest(), float64(f.Commands)/float64(max(1, f.Requests)))
	}
	fmt.Fprintln(out)
	return nil
}
