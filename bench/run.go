package bench

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys returns n distinct subjects, built once so that making a key costs
// nothing during a run. One key is the hot-key case.
func Keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%05d", i)
	}
	if n == 1 {
		ks[0] = "hot"
	}
	return ks
}

// Measurement is one peer's run: counts, time, and what the process and the
// Redis server spent on it.
type Measurement struct {
	Decisions, Allowed, Errors int64
	FirstErr                   error
	Elapsed                    time.Duration
	Mallocs                    uint64        // heap allocations in this process, all goroutines
	Trips                      int64         // client round trips (go-redis hook)
	Borrowed                   int64         // ratelimit's decisions allowed from borrowed slices
	Server                     ServerStats   // Redis work, when there is a server
	CPU                        time.Duration // this process's CPU time (user + system)
	Latency                    Histogram
	Slow                       int64 // decisions that took SlowDecision or longer, counted exactly
}

// ClientCPUPerOp is this process's CPU time per decision, in microseconds:
// the limiter, the client, the benchmark loop.
func (m Measurement) ClientCPUPerOp() float64 {
	return float64(m.CPU.Microseconds()) / float64(m.Decisions)
}

// Histogram counts decision latencies in log-linear microsecond buckets:
// below 8 µs one bucket per microsecond, above eight buckets per power of
// two, so a bucket is at most 1/8 of its lower end wide.
type Histogram [histBuckets]int64

const histBuckets = 8 * 40 // up to 2^41 µs, about 25 days

// histIndex is the bucket of a latency of us microseconds.
func histIndex(us uint64) int {
	if us < 8 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1)), e ≥ 3
	i := (e-2)*8 + int(us>>(e-3)&7)
	return min(i, histBuckets-1)
}

// histLower is the lowest latency bucket i holds, in microseconds.
func histLower(i int) uint64 {
	if i < 8 {
		return uint64(i)
	}
	e := i/8 + 2
	return uint64(8+i%8) << (e - 3)
}

// Add counts one latency.
func (h *Histogram) Add(d time.Duration) { h[histIndex(uint64(max(0, d.Microseconds())))]++ }

func (h *Histogram) merge(o *Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// Quantile is an upper bound of the q quantile: the upper end of its
// bucket, at most 12.5 % above the latency itself.
func (h *Histogram) Quantile(q float64) time.Duration {
	var n int64
	for _, c := range h {
		n += c
	}
	want := int64(q * float64(n))
	var seen int64
	for i, c := range h {
		if seen += c; seen > want {
			return time.Duration(histLower(i+1)) * time.Microsecond
		}
	}
	return time.Duration(histLower(len(h))) * time.Microsecond
}

// Over counts latencies of at least d, to the bucket: d is rounded down to
// its bucket's lower end (by at most 1/9 of d).
func (h *Histogram) Over(d time.Duration) int64 {
	var n int64
	for i := histIndex(uint64(max(0, d.Microseconds()))); i < len(h); i++ {
		n += h[i]
	}
	return n
}

// SlowDecision is the latency from which a decision counts as slow in
// Measurement.Slow: ratelimit's default Timeout.
const SlowDecision = 50 * time.Millisecond

// PerSec is decisions per second.
func (m Measurement) PerSec() float64 { return float64(m.Decisions) / m.Elapsed.Seconds() }

// DecidedPerSec is decisions per second that did not fail: for ratelimit,
// those the store made (a degraded decision counts as an error).
func (m Measurement) DecidedPerSec() float64 {
	return float64(m.Decisions-m.Errors) / m.Elapsed.Seconds()
}

// NsPerOp is wall time over decisions: the figure RunParallel reports.
func (m Measurement) NsPerOp() float64 {
	return float64(m.Elapsed.Nanoseconds()) / float64(m.Decisions)
}

// AllocsPerOp is heap allocations per decision, the client's included.
func (m Measurement) AllocsPerOp() float64 { return float64(m.Mallocs) / float64(m.Decisions) }

// TripsPerOp is client round trips to Redis per decision.
func (m Measurement) TripsPerOp() float64 { return float64(m.Trips) / float64(m.Decisions) }

// CmdsPerOp is Redis commands per decision, those run inside scripts and
// transactions included.
func (m Measurement) CmdsPerOp() float64 {
	return float64(m.Server.Total()) / float64(m.Decisions)
}

// RedisCPUPerOp is Redis server CPU time per decision, in microseconds.
func (m Measurement) RedisCPUPerOp() float64 { return m.Server.CPU * 1e6 / float64(m.Decisions) }

// Runner measures instances against one Redis, a Redis Cluster, or none.
type Runner struct {
	Env   *Env
	Admin *redis.Client // reads INFO; nil for memory-only and cluster runs
	// Nodes read INFO on each node of a cluster; server stats are their sum.
	Nodes []*redis.Client
}

// NewRunner connects to the Redis at addr (empty: memory peers only).
func NewRunner(addr string) *Runner {
	r := &Runner{Env: &Env{Addr: addr, Trips: &TripCounter{}, Borrowed: &atomic.Int64{}}}
	if addr != "" {
		r.Admin = redis.NewClient(&redis.Options{Addr: addr})
	}
	return r
}

// NewClusterRunner is a Runner whose Redis peers use a cluster client to
// the nodes at addrs (see Env.Cluster).
func NewClusterRunner(addrs []string) *Runner {
	r := &Runner{Env: &Env{Cluster: addrs, Trips: &TripCounter{}, Borrowed: &atomic.Int64{}}}
	for _, a := range addrs {
		r.Nodes = append(r.Nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	return r
}

// Close releases the admin clients.
func (r *Runner) Close() {
	if r.Admin != nil {
		r.Admin.Close()
	}
	for _, c := range r.Nodes {
		c.Close()
	}
}

// serverStats reads the server's stats, or sums every node's; ok is false
// when there is no server to ask.
func (r *Runner) serverStats(ctx context.Context) (st ServerStats, ok bool, err error) {
	if r.Admin != nil {
		st, err = ReadServerStats(ctx, r.Admin)
		return st, true, err
	}
	if len(r.Nodes) == 0 {
		return ServerStats{}, false, nil
	}
	st = ServerStats{Calls: map[string]int64{}, Usec: map[string]int64{}}
	for _, c := range r.Nodes {
		n, err := ReadServerStats(ctx, c)
		if err != nil {
			return ServerStats{}, true, err
		}
		st.CPU += n.CPU
		for k, v := range n.Calls {
			st.Calls[k] += v
			st.Usec[k] += n.Usec[k]
		}
	}
	return st, true, nil
}

// Throughput runs conc goroutines, each with its own Worker of inst, for
// about d; goroutine g walks keys round-robin from offset g·len/conc.
func (r *Runner) Throughput(ctx context.Context, inst *Instance, keys []string, conc int, d time.Duration) (Measurement, error) {
	workers := make([]Worker, conc)
	for i := range workers {
		workers[i] = inst.NewWorker()
	}
	var (
		m0, m1 runtime.MemStats
		s0     ServerStats
		err    error
	)
	if s0, _, err = r.serverStats(ctx); err != nil {
		return Measurement{}, err
	}
	t0, b0 := r.Env.Trips.Load(), r.Env.Borrowed.Load()
	cpu0 := processCPU()
	runtime.ReadMemStats(&m0)

	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		mu    sync.Mutex
		total Measurement
	)
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func(w Worker, i int) {
			defer wg.Done()
			var n, ok, bad int64
			var first error
			var lat Histogram
			var slow int64
			for !stop.Load() {
				t := time.Now()
				allowed, err := w(ctx, keys[i])
				took := time.Since(t)
				lat.Add(took)
				if took >= SlowDecision {
					slow++
				}
				if i++; i == len(keys) {
					i = 0
				}
				n++
				if allowed {
					ok++
				}
				if err != nil {
					if bad++; first == nil {
						first = err
					}
				}
			}
			mu.Lock()
			total.Decisions += n
			total.Allowed += ok
			total.Errors += bad
			total.Latency.merge(&lat)
			total.Slow += slow
			if total.FirstErr == nil {
				total.FirstErr = first
			}
			mu.Unlock()
		}(workers[g], g*len(keys)/conc)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	total.Elapsed = time.Since(start)

	runtime.ReadMemStats(&m1)
	total.CPU = processCPU() - cpu0
	total.Mallocs = m1.Mallocs - m0.Mallocs
	total.Trips = r.Env.Trips.Load() - t0
	total.Borrowed = r.Env.Borrowed.Load() - b0
	if s1, ok, err := r.serverStats(ctx); err != nil {
		return Measurement{}, err
	} else if ok {
		total.Server = s1.Sub(s0)
	}
	return total, nil
}

// Admission is the outcome of many instances hammering one key.
type Admission struct {
	Instances int
	Admitted  int64
	Decisions int64
	Errors    int64
	FirstErr  error
	Trips     int64         // client round trips to Redis during the window
	Borrowed  int64         // ratelimit's admissions from borrowed slices
	Span      time.Duration // from the first request sent to the last answer
	Bound     int           // C + R·Span: the most an exact limiter may admit
	// Windows is how many intervals [a, b] WindowOver checked, and
	// WindowOver the most admissions any of them held beyond its own
	// bound C + R·(b−a) (0: none over); see worstWindow.
	Windows    int64
	WindowOver int64
}

// Over is how many requests were admitted beyond the bound (0 if none).
func (a Admission) Over() int64 { return max(0, a.Admitted-int64(a.Bound)) }

// OverAdmission builds n instances of peer, each with its own client, and
// has perInstance goroutines of each ask for one key for about window,
// sleeping pause between requests (0: a closed loop, the most pressure).
// Errors count as not admitted.
func (r *Runner) OverAdmission(ctx context.Context, peer Peer, lim Limit, n, perInstance int, window, pause time.Duration, prefix string) (Admission, error) {
	insts := make([]*Instance, n)
	for i := range insts {
		inst, err := peer.New(r.Env, lim, prefix)
		if err != nil {
			for _, in := range insts[:i] {
				in.Close()
			}
			return Admission{}, err
		}
		insts[i] = inst
	}
	defer func() {
		for _, in := range insts {
			in.Close()
		}
	}()
	// Dial, load scripts, fill pools: none of that belongs in the window.
	var wg sync.WaitGroup
	for _, in := range insts {
		for range perInstance {
			wg.Add(1)
			go func(w Worker) { defer wg.Done(); _, _ = w(ctx, "warm-up") }(in.NewWorker())
		}
	}
	wg.Wait()

	a := Admission{Instances: n}
	var (
		mu         sync.Mutex
		begin      = make(chan struct{})
		start      time.Time
		deadline   time.Time
		lastAnswer time.Time
		stamps     []stamp
	)
	for _, in := range insts {
		for range perInstance {
			wg.Add(1)
			go func(w Worker) {
				defer wg.Done()
				<-begin
				var dec, ok, bad int64
				var first error
				var mine []stamp
				for time.Now().Before(deadline) {
					sent := time.Since(start)
					allowed, err := w(ctx, "one")
					if err == nil && allowed {
						mine = append(mine, stamp{sent, time.Since(start)})
					}
					if pause > 0 {
						time.Sleep(pause)
					}
					dec++
					if err != nil {
						if bad++; first == nil {
							first = err
						}
					} else if allowed {
						ok++
					}
				}
				end := time.Now()
				mu.Lock()
				a.Decisions += dec
				a.Admitted += ok
				a.Errors += bad
				stamps = append(stamps, mine...)
				if a.FirstErr == nil {
					a.FirstErr = first
				}
				if end.After(lastAnswer) {
					lastAnswer = end
				}
				mu.Unlock()
			}(in.NewWorker())
		}
	}
	trips, borrowed := r.Env.Trips.Load(), r.Env.Borrowed.Load()
	start = time.Now()
	deadline = start.Add(window)
	close(begin)
	wg.Wait()
	a.Trips = r.Env.Trips.Load() - trips
	a.Borrowed = r.Env.Borrowed.Load() - borrowed
	a.Span = lastAnswer.Sub(start)
	a.Bound = lim.Bound(a.Span)
	a.WindowOver, a.Windows = worstWindow(stamps, lim)
	return a, nil
}

// stamp is one admitted request: when it was sent and when its answer
// came, since the run began. It was decided at some moment in between,
// in the store or, from a borrowed slice, in process.
type stamp struct{ sent, answered time.Duration }

// worstWindow checks every interval [a, b], a the sending of an admitted
// request and b the answer to one, against lim's bound for it, C + R·(b−a),
// counting the admissions surely decided inside it: sent at or after a,
// answered by b. Any other interval holds no more admissions for a longer
// Δ, so these are all that can exceed their bound. It returns the most
// admissions any interval held beyond its bound (0 when none did) and the
// intervals checked. O(n²) in the admissions, which the bound keeps few.
func worstWindow(adm []stamp, lim Limit) (over, windows int64) {
	byAnswer := slices.SortedFunc(slices.Values(adm), func(x, y stamp) int { return cmp.Compare(x.answered, y.answered) })
	starts := make([]time.Duration, len(adm))
	for i, s := range adm {
		starts[i] = s.sent
	}
	slices.Sort(starts)
	for _, a := range slices.Compact(starts) {
		var k int64
		for _, s := range byAnswer {
			if s.sent < a {
				continue
			}
			k++
			windows++
			over = max(over, k-int64(lim.Bound(s.answered-a)))
		}
	}
	return over, windows
}
