package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// How decisions travel. Each caller puts its request in its
// destination's queue (the store's one queue; a Cluster's or Ring's queue
// per node) and waits for its own answer, or its context's end. A request
// that finds no call on its way out starts one at once, on a goroutine of
// its own (a carrier), which takes everything queued by the time it runs:
// so a decision waits for a call to leave, not for another call to come
// back, and under load, while the machine is busy, batches grow by
// themselves — no timer, no added delay. A queue has at most maxCalls
// carriers, the client's connection pool: past it requests wait for the
// first carrier back (another call's round trip), which takes them all. One carrier stays a while
// once its queue is empty, so that a lone caller's next decision wakes it
// rather than starting a goroutine (and growing its stack) again.
//
// A cold pool (a deploy, a scale-up mid-flood) is not an outage (DESIGN
// §4): a new connection costs a dial and HELLO, round trips that the
// requests waiting may not have. A carrier needed while calls are in
// flight on every open connection opens one first (a PING) and only
// then takes what waits; until then the calls in flight take it when
// they are back. So the connections a load needs open ahead of it, as
// fast as carriers used to open them, and no request waits for a dial
// while another call can carry it.
//
// A call is sent under its batch's latest deadline but at least minSend,
// not under a caller's Timeout alone: go-redis closes a connection whose
// call outlived its context, so with Redis nearly Timeout away calls under
// the callers' deadlines would each dial again, and fail, for ever. One
// exception (see alone): a lone request goes on its caller's goroutine,
// under its own deadline, while calls take far less than that.

// request is one decision waiting in a queue.
type request struct {
	ctx        context.Context // values; its cancellation is the caller's alone
	bucket.Ask                 // Subj passed through bucket.HashSubject; Deadline zero: none

	reply string        // this request's part of the script's reply, or
	err   error         // why there is none; both set before done is sent
	done  chan struct{} // one value once answered; buffered
	timer *time.Timer   // the caller's deadline, nil until needed
	gone  atomic.Bool   // the caller stopped waiting: not sent if not yet sent
}

// requests keeps requests, with their channel and timer, for reuse: a
// caller gives its request back once answered, when no carrier holds it
// any more (see BENCHMARKS.md, "Tricks kept"). A request its caller left
// unanswered is never reused.
var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// newRequest returns a request from the pool, set for one decision.
func newRequest(ctx context.Context, a bucket.Ask) *request {
	r := requests.Get().(*request)
	r.ctx, r.Ask = ctx, a
	return r
}

// release gives r, answered, back to the pool.
func (r *request) release() {
	r.ctx, r.Ask, r.reply, r.err = nil, bucket.Ask{}, "", nil
	r.gone.Store(false)
	requests.Put(r)
}

// wait waits for r's answer until deadline or ctx's cancellation; a request not yet sent then
// never is.
func wait(ctx context.Context, deadline time.Time, r *request) error {
	// The deadline's own timer wakes us in one hop; ctx.Done closes from a
	// goroutine that AfterFunc starts, one hop later on a busy machine.
	var expired <-chan time.Time
	if !deadline.IsZero() {
		if r.timer == nil {
			r.timer = time.NewTimer(time.Until(deadline))
		} else {
			r.timer.Reset(time.Until(deadline))
		}
		defer r.timer.Stop()
		expired = r.timer.C
	}
	select {
	case <-r.done:
		return nil
	case <-expired:
	case <-ctx.Done():
	}
	r.gone.Store(true)
	select {
	case <-r.done: // answered as we gave up: use it
		return nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// queue holds the requests for one destination (see Store.queues).
// Its fields are guarded by the store's mu.
type queue struct {
	waiting []*request
	calls   int  // carriers running, the idle one included
	dialing int  // carriers opening a connection before they carry (see cold)
	leaving bool // a carrier is on its way to take what is waiting
	idle    bool // a carrier waits on wake for the next request
	used    bool // a batch left since the idle carrier's last tick
	wake    chan struct{}
}

// carrierIdle is how long, at least, the idle carrier waits for the next
// request before it leaves (at most twice that).
const carrierIdle = time.Second

// Bounds of one script call: Lua's unpack takes about 8000 values.
const (
	maxBatch     = 256
	maxBatchKeys = 4096
)

// CallError is the error of one failed store call, shared by every
// decision that rode in it: the circuit breaker counts the call once.
type CallError struct {
	Call uint64 // unique per store call
	Err  error
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// enqueue queues r for dest and starts a carrier if none is on its way
// and the queue has room.
func (s *Store) enqueue(r *request, dest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[dest]
	if q == nil {
		q = &queue{wake: make(chan struct{}, 1)}
		s.queues[dest] = q
	}
	q.waiting = append(q.waiting, r)
	s.startCarrier(dest, q)
}

// startCarrier sends a carrier for q unless one is on its way: the idle
// one, or a new one if q has fewer than maxCalls. s.mu is held.
func (s *Store) startCarrier(dest string, q *queue) {
	switch {
	case q.leaving || len(q.waiting) == 0:
	case q.idle:
		q.idle, q.leaving = false, true
		q.wake <- struct{}{}
	case q.calls < s.maxCalls:
		c := s.cold(dest, q)
		switch {
		case c == nil:
			q.leaving = true
			q.calls++
			go s.carry(dest, q, nil)
		case q.calls < s.maxCalls-1:
			// Never the last carrier, which a lone call may kick when
			// done.
			q.calls++
			q.dialing++
			go s.carry(dest, q, c) // not on its way: it dials first
		}
	}
}

// cold returns the client of q's destination when a new carrier would
// wait there for a new connection while calls in flight could carry
// what waits (their carriers, or lone calls that kick the queue when
// done): no connection is idle, or, while connections open ahead, each
// open one may be taken by one of them. Else nil: a connection is free
// (a warm pool serves as it did), or nothing else would come.
// s.mu is held; q has no idle carrier and fewer than maxCalls.
func (s *Store) cold(dest string, q *queue) redis.UniversalClient {
	// The calls that hold a connection or are on their way to take one.
	busy := q.calls - q.dialing + int(s.lastTo(dest).lone.Load())
	if busy <= 0 {
		return nil
	}
	c := s.client
	if s.split {
		n := s.nodeClient(q.waiting[len(q.waiting)-1].Subj)
		if n == nil {
			return nil
		}
		c = n
	}
	// The dialing carriers' connections may count as open already; an
	// idle one may be about to serve a carrier that took its batch, or a
	// lone call not yet at the pool.
	st := poolStats(c)
	if st != nil && (st.IdleConns == 0 || int(st.TotalConns) <= busy+q.dialing) {
		return c
	}
	return nil
}

// poolStats returns c's pool statistics; nil when c panics (a client of
// the user's making, as send recovers from).
func poolStats(c redis.UniversalClient) (st *redis.PoolStats) {
	defer func() {
		if recover() != nil {
			st = nil
		}
	}()
	return c.PoolStats()
}

// errNotCold: a connection is idle when a carrier sent to open one (see
// cold) is about to: a carrier in flight is back, and will take what
// waits. Its PING would take that connection, and that carrier dial.
var errNotCold = errors.New("a connection is idle")

// ping opens a connection ahead (see cold), within dialAhead; an error
// when it could not, or c panicked, or errNotCold.
func (s *Store) ping(c redis.UniversalClient) (err error) {
	if st := poolStats(c); st != nil && st.IdleConns > 0 {
		return errNotCold
	}
	ctx := s.clock.Context(context.Background(), time.Now().Add(dialAhead))
	defer func() {
		ctx.Stop()
		if p := recover(); p != nil {
			err = fmt.Errorf("core: the Redis client panicked: %v", p)
		}
	}()
	return c.Ping(ctx).Err()
}

// lastCall is what alone knows of the last call to one destination.
type lastCall struct {
	took   atomic.Int64 // ns
	failed atomic.Bool  // a decision in it got an error
	lone   atomic.Int32 // lone calls (see alone) in flight to it, for cold
}

// lastTo returns the last call to dest (see Store.queues): a
// Cluster's or Ring's nodes each keep their own, so one slow node never
// has its lone calls timed by the others' fast ones.
func (s *Store) lastTo(dest string) *lastCall {
	if dest == "" {
		return &s.last
	}
	if v, ok := s.nodeLast.Load(dest); ok {
		return v.(*lastCall)
	}
	v, _ := s.nodeLast.LoadOrStore(dest, new(lastCall))
	return v.(*lastCall)
}

// alone reports that r, for dest, may go on its caller's goroutine,
// paying no hand-off to a carrier: nothing else is queued or in a call
// on any node, the client bounds calls by their context's deadline
// (ContextTimeoutEnabled; a Cluster or Ring client follows redirections
// under it too), r's caller can never cancel it before its deadline, and
// the last call to dest succeeded in under a quarter of the time r has.
// A call that outlives its deadline costs its connection, and sends the
// next calls to dest by carrier, under minSend, until one is fast again:
// Redis nearly Timeout away never makes lone calls dial again and again.
//
// When it reports true, r is counted among dest's lone calls, and it
// was so before it saw itself alone: a request that came meanwhile, and
// queued, sees it in cold, and does not race it for its connection.
func (s *Store) alone(r *request, dest string) bool {
	if !s.deadlines || r.Deadline.IsZero() || r.ctx.Done() != nil || s.running.Load() != 1 {
		return false
	}
	last := s.lastTo(dest)
	if last.failed.Load() || 4*time.Duration(last.took.Load()) >= time.Until(r.Deadline) {
		return false
	}
	last.lone.Add(1)
	if s.running.Load() != 1 {
		last.lone.Add(-1)
		return false
	}
	return true
}

// sendAlone sends r, which alone let go on its caller's goroutine, under
// r's own deadline. A call cut short by that deadline was slow, not
// failing, as a carrier's would have been had its caller left then: it
// is not the store's last error (the breaker does not count it), but it
// sends the next calls to dest by carrier.
//
// Requests queued for dest meanwhile may have counted on this call's
// connection (see cold): a carrier is sent for them once it is free.
func (s *Store) sendAlone(r *request, dest string) {
	last := s.lastTo(dest) // alone counted r in last.lone
	ctx := s.clock.Context(r.ctx, r.Deadline)
	s.send(ctx, dest, []*request{r})
	ctx.Stop()
	last.lone.Add(-1)
	if p := s.lastErr.Load(); p != nil && IsTimeout(r.err) && errors.Is(r.err, *p) && !time.Now().Before(r.Deadline) {
		s.lastErr.CompareAndSwap(p, nil)
	}
	if s.running.Add(-1) > 0 {
		s.mu.Lock()
		if q := s.queues[dest]; q != nil {
			s.startCarrier(dest, q)
		}
		s.mu.Unlock()
	}
}

// forget drops a node's queue once nothing uses it. s.mu is held.
func (s *Store) forget(dest string, q *queue) {
	if dest != "" && q.calls == 0 && len(q.waiting) == 0 && s.queues[dest] == q {
		delete(s.queues, dest)
	}
}

// carry sends what waits in q as one call, hands out the answers, and goes
// on with what queued meanwhile if no other carrier is on its way. Then,
// unless another carrier is idle, it waits, idle, for startCarrier to wake
// it. A lone request does not yield first: nothing could join it. With
// cold (see Store.cold), it first opens a connection on that client (a
// PING, within dialAhead); if that fails, or a connection is idle by
// then (a carrier slow to run under load: the carrier that freed it takes
// what waits), it leaves what waits to the calls in flight, which say why
// when they fail too.
func (s *Store) carry(dest string, q *queue, cold redis.UniversalClient) {
	var tick *time.Timer
	var buf []*request
	if cold != nil {
		err := s.ping(cold)
		s.mu.Lock()
		q.dialing--
		if err != nil {
			q.calls--
			s.forget(dest, q)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	for {
		// Let the goroutines ready to run queue first: callers woken
		// together (a batch's answers, a probe's) then leave in one call.
		if s.running.Load() > 1 {
			runtime.Gosched()
		}
		s.mu.Lock()
		batch := s.next(q, buf)
		q.leaving = false
		if batch != nil {
			s.startCarrier(dest, q) // more than one call's worth is waiting
			s.mu.Unlock()
			ctx := s.batchContext(batch)
			s.send(ctx, dest, batch)
			if c, ok := ctx.(*deadlineCtx); ok {
				c.Stop()
			}
			s.running.Add(-int64(len(batch)))
			for _, r := range batch {
				r.done <- struct{}{}
			}
			clear(batch)
			buf = batch[:0]
			s.mu.Lock()
			if !q.leaving && len(q.waiting) > 0 {
				q.leaving = true
				s.mu.Unlock()
				continue
			}
		}
		if q.idle {
			q.calls--
			s.forget(dest, q)
			s.mu.Unlock()
			return
		}
		q.idle = true
		s.mu.Unlock()
		if tick == nil {
			tick = time.NewTimer(carrierIdle)
		}
		if !s.rest(dest, q, tick) {
			return
		}
	}
}

// rest waits, idle, for startCarrier to wake the carrier; false: it left,
// at a tick of carrierIdle with no batch sent since the one before.
func (s *Store) rest(dest string, q *queue, tick *time.Timer) bool {
	for {
		select {
		case <-q.wake:
			return true
		case <-tick.C:
		}
		s.mu.Lock()
		if q.idle && !q.used {
			q.idle = false
			q.calls--
			s.forget(dest, q)
			s.mu.Unlock()
			return false
		}
		q.used = false
		s.mu.Unlock()
		tick.Reset(carrierIdle)
	}
}

// next takes the next batch off q into buf, leaving out requests whose
// callers are gone; nil when nothing is left. s.mu is held.
func (s *Store) next(q *queue, buf []*request) []*request {
	batch := buf[:0]
	keys, i := 0, 0
	for ; i < len(q.waiting) && len(batch) < maxBatch; i++ {
		r := q.waiting[i]
		if r.gone.Load() {
			s.running.Add(-1) // never sent
			continue
		}
		if len(batch) > 0 && keys+len(r.Policies) > maxBatchKeys {
			break
		}
		batch = append(batch, r)
		keys += len(r.Policies)
	}
	n := copy(q.waiting, q.waiting[i:])
	clear(q.waiting[n:])
	q.waiting = q.waiting[:n]
	if len(batch) == 0 {
		return nil
	}
	q.used = true
	return batch
}

// send decides batch under ctx and leaves each request's answer (or
// error) in it: one script call for the batch — of TokenBuckets on a
// standalone Redis or a Ring shard, of TokenBucketsAcross on a Cluster
// node — or, where a node refuses that (Redis before 7, a slot on the
// move), a pipeline of one call per subject. It keeps how that went in
// dest's lastCall, whoever sent it (a carrier, or a lone caller).
func (s *Store) send(ctx context.Context, dest string, batch []*request) {
	call, start := s.idSeq.Add(1), time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.fail(batch, call, fmt.Errorf("core: the Redis client panicked: %v", p))
		}
		last, failed := s.lastTo(dest), false
		for _, r := range batch {
			failed = failed || r.err != nil
		}
		last.took.Store(int64(time.Since(start)))
		if last.failed.Load() != failed {
			last.failed.Store(failed)
		}
	}()
	if !s.split || len(batch) == 1 && !s.spans(batch[0]) {
		keys, args := s.encodeShort(ctx, call, batch)
		reply, err := TokenBuckets.Run(ctx, s.client, keys, args...).Text()
		s.settle(ctx, batch, call, reply, err)
		return
	}
	node := s.nodeClient(batch[0].Subj)
	if node != nil && s.sendNode(ctx, node, call, batch) {
		return
	}
	s.sendEach(ctx, node, call, batch)
}

// spans reports a request across subjects of more than one Cluster slot:
// one call of TokenBucketsAcross on its node, never of TokenBuckets.
func (s *Store) spans(r *request) bool {
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		return false
	}
	for _, p := range r.Across {
		if p.Subj != r.Subj {
			return true
		}
	}
	return false
}

// sendNode decides batch in one script call on node, the Redis server of
// every subject in it; it reports false, having changed nothing, when
// the node did not run the script.
func (s *Store) sendNode(ctx context.Context, node *redis.Client, call uint64, batch []*request) bool {
	script := TokenBuckets // a Ring shard is a Redis of its own
	if _, ok := s.client.(*redis.ClusterClient); ok {
		if s.noAcross.Load() {
			return false
		}
		script = TokenBucketsAcross
	}
	keys, args := s.encode(ctx, call, batch)
	if script == TokenBucketsAcross {
		n := len(keys) - 1
		for _, k := range keys[:n] {
			args = append(args, k)
		}
		keys, args = keys[n:], append(args, n)
	}
	reply, err := script.Run(ctx, node, keys, args...).Text()
	switch {
	case noScriptFlags(err):
		s.noAcross.Store(true)
		return false
	case notRun(err) || redis.HasErrorPrefix(err, "Script attempted to"):
		// A key of another node, or a slot on the move: checked before
		// the script wrote anything.
		return false
	}
	s.settle(ctx, batch, call, reply, err)
	return true
}

// sendEach decides batch by subject: a pipeline of one call each on node
// (nil: not known yet), then through the Cluster or Ring client alone for
// the calls the node did not run.
func (s *Store) sendEach(ctx context.Context, node *redis.Client, call uint64, batch []*request) {
	kept := batch[:0:0]
	for _, r := range batch {
		if s.spans(r) {
			// Never split: FailMode decides it while the slot moves.
			r.err = &CallError{Call: call, Err: errSlotsSplit}
		} else {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return
	}
	batch = kept
	groups := bySubject(batch)
	keys, args := make([][]string, len(groups)), make([][]any, len(groups))
	cmds := make([]*redis.Cmd, len(groups))
	// One node's pipeline, on that node's own client: go-redis's Cluster
	// pipeline races with itself while it follows redirections (seen
	// under -race during a slot migration). A call the node did not run
	// (NOSCRIPT, MOVED, ASK, TRYAGAIN) goes again alone through the
	// Cluster or Ring client, which follows redirections.
	if node != nil {
		pipe := node.Pipeline()
		for i, g := range groups {
			keys[i], args[i] = s.encodeShort(ctx, s.idSeq.Add(1), g)
			cmds[i] = TokenBuckets.EvalSha(ctx, pipe, keys[i], args[i]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, g := range groups {
		if cmds[i] == nil || notRun(cmds[i].Err()) {
			if keys[i] == nil {
				keys[i], args[i] = s.encodeShort(ctx, s.idSeq.Add(1), g)
			}
			cmds[i] = TokenBuckets.Run(ctx, s.client, keys[i], args[i]...)
		}
		reply, err := cmds[i].Text()
		s.settle(ctx, g, call, reply, err)
	}
}

// nodeClient returns the client of the Redis server that decides subj (a
// subject passed through bucket.HashSubject), or nil before the slot map is
// known.
func (s *Store) nodeClient(subj string) *redis.Client {
	if !s.ready.Load() {
		return nil
	}
	// The node of the keys' hash tag, {subj}: subj hashes as {subj} does,
	// having no braces (bucket.HashSubject), and costs no allocation.
	tag := subj
	if subj == "" { // hashes to a random slot; "{}" does not
		tag = "{}"
	}
	var c *redis.Client
	var err error
	switch cl := s.client.(type) {
	case *redis.ClusterClient:
		c, err = cl.MasterForKey(context.Background(), tag)
	case *redis.Ring:
		c, err = cl.GetShardClientForKey(tag)
	}
	if err != nil {
		return nil
	}
	return c
}

// bySubject splits a batch into its subjects' requests, in order.
func bySubject(batch []*request) [][]*request {
	var groups [][]*request
	at := make(map[string]int, len(batch))
	for _, r := range batch {
		i, ok := at[r.Subj]
		if !ok {
			i = len(groups)
			at[r.Subj] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// settle leaves the answers of one script call, or its error, in batch.
func (s *Store) settle(ctx context.Context, batch []*request, call uint64, reply string, err error) {
	if err != nil {
		last := err // a copy, so that err itself is not allocated on every call
		s.lastErr.Store(&last)
		if c, ok := s.client.(*redis.ClusterClient); ok && !SlotMoving(err) {
			// A failed primary's slots move to its replica: read the new
			// map now, not at go-redis's next periodic refresh (60s).
			c.ReloadState(ctx)
		}
		s.fail(batch, call, err)
		return
	}
	if !s.ready.Load() {
		s.ready.Store(true)
	}
	if s.lastErr.Load() != nil {
		s.lastErr.Store(nil)
	}
	for _, r := range batch {
		w := 1 + 3*len(r.Policies)
		if op, _ := bucket.SplitOp(r.Op); op > bucket.OpRefund && op != bucket.OpLend {
			w++ // bucket.Outcome.Extra
		}
		end := fieldsEnd(reply, w)
		if end < 0 {
			r.err = fmt.Errorf("%w: %q for %d decisions", bucket.BadReply, truncate(reply), len(batch))
			continue
		}
		r.reply, reply = reply[:end], reply[min(end+1, len(reply)):]
	}
}

// fail gives every request of batch not yet answered the error of call.
func (s *Store) fail(batch []*request, call uint64, err error) {
	var ce *CallError
	if !errors.As(err, &ce) {
		ce = &CallError{Call: call, Err: err}
	}
	for _, r := range batch {
		if r.reply == "" && r.err == nil {
			r.err = ce
		}
	}
}

// batchContext is the context a batch is sent under: the values of its
// first request, none of its callers' cancellation (one caller leaving
// must not fail the others), and the latest of their deadlines, but at
// least minSend from now: a caller waits only until its own deadline, and
// a call that outlives it can still learn why Redis fails (a dial error
// comes after go-redis's dial retries, longer than a typical Timeout) and
// report it to the next decisions. With a deadline it is s.clock's.
func (s *Store) batchContext(batch []*request) context.Context {
	latest := time.Now().Add(minSend)
	ctx := batch[0].ctx
	for _, r := range batch {
		if r.Deadline.IsZero() {
			if ctx.Done() != nil {
				ctx = context.WithoutCancel(ctx)
			}
			return ctx
		}
		if r.Deadline.After(latest) {
			latest = r.Deadline
		}
	}
	return s.clock.Context(ctx, latest)
}

// minSend is the least time a script call is given.
const minSend = time.Second

// dialAhead bounds the opening of a connection ahead of the load (see
// cold): no caller waits for it, and a slow dial (a SYN retransmitted
// after a second) still opens one.
const dialAhead = 10 * time.Second
