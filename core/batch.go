package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/transport"
)

// How a RedisStore's decisions travel. Each caller puts its request in its
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
// A call is sent under its batch's latest deadline but at least minSend,
// not under a caller's Timeout alone: go-redis closes a connection whose
// call outlived its context, so with Redis nearly Timeout away calls under
// the callers' deadlines would each dial again, and fail, for ever. One
// exception (see alone): a lone request goes on its caller's goroutine,
// under its own deadline, while calls take far less than that.

// request is one decision waiting in a queue.
type request struct {
	ctx      context.Context // values; its cancellation is the caller's alone
	deadline time.Time       // the caller's; zero: none
	subj     string          // passed through transport.HashSubject
	op       int             // bucket.OpTake, bucket.OpPeek or bucket.OpRefund
	n        int
	policies []bucket.Policy

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
func newRequest(ctx context.Context, deadline time.Time, op int, subj string, n int, policies []bucket.Policy) *request {
	r := requests.Get().(*request)
	r.ctx, r.deadline, r.subj, r.op, r.n, r.policies = ctx, deadline, subj, op, n, policies
	return r
}

// release gives r, answered, back to the pool.
func (r *request) release() {
	r.ctx, r.subj, r.policies, r.reply, r.err = nil, "", nil, "", nil
	r.gone.Store(false)
	requests.Put(r)
}

// queue holds the requests for one destination (see RedisStore.queues).
// Its fields are guarded by the store's mu.
type queue struct {
	waiting []*request
	calls   int  // carriers running, the idle one included
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

// callError is the error of one failed store call, shared by every
// decision that rode in it: the circuit breaker counts the call once.
type callError struct {
	call uint64 // unique per store call
	err  error
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// enqueue queues r for dest and starts a carrier if none is on its way
// and the queue has room.
func (s *RedisStore) enqueue(r *request, dest string) {
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
func (s *RedisStore) startCarrier(dest string, q *queue) {
	switch {
	case q.leaving || len(q.waiting) == 0:
	case q.idle:
		q.idle, q.leaving = false, true
		q.wake <- struct{}{}
	case q.calls < s.maxCalls:
		q.leaving = true
		q.calls++
		go s.carry(dest, q)
	}
}

// lastCall is what alone knows of the last call to one destination.
type lastCall struct {
	took   atomic.Int64 // ns
	failed atomic.Bool  // a decision in it got an error
}

// lastTo returns the last call to dest (see RedisStore.queues): a
// Cluster's or Ring's nodes each keep their own, so one slow node never
// has its lone calls timed by the others' fast ones.
func (s *RedisStore) lastTo(dest string) *lastCall {
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
func (s *RedisStore) alone(r *request, dest string) bool {
	if !s.deadlines || r.deadline.IsZero() || r.ctx.Done() != nil || s.running.Load() != 1 {
		return false
	}
	last := s.lastTo(dest)
	return !last.failed.Load() && 4*time.Duration(last.took.Load()) < time.Until(r.deadline)
}

// sendAlone sends r, which alone let go on its caller's goroutine, under
// r's own deadline. A call cut short by that deadline was slow, not
// failing, as a carrier's would have been had its caller left then: it
// is not the store's last error (the breaker does not count it), but it
// sends the next calls to dest by carrier.
func (s *RedisStore) sendAlone(r *request, dest string) {
	ctx := s.clock.Context(r.ctx, r.deadline)
	s.send(ctx, dest, []*request{r})
	ctx.Stop()
	if p := s.lastErr.Load(); p != nil && transport.IsTimeout(r.err) && errors.Is(r.err, *p) && !time.Now().Before(r.deadline) {
		s.lastErr.CompareAndSwap(p, nil)
	}
	s.running.Add(-1)
}

// forget drops a node's queue once nothing uses it. s.mu is held.
func (s *RedisStore) forget(dest string, q *queue) {
	if dest != "" && q.calls == 0 && len(q.waiting) == 0 && s.queues[dest] == q {
		delete(s.queues, dest)
	}
}

// carry sends what waits in q as one call, hands out the answers, and goes
// on with what queued meanwhile if no other carrier is on its way. Then,
// unless another carrier is idle, it waits, idle, for startCarrier to wake
// it. A lone request does not yield first: nothing could join it.
func (s *RedisStore) carry(dest string, q *queue) {
	var tick *time.Timer
	var buf []*request
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
			if c, ok := ctx.(*transport.Ctx); ok {
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
func (s *RedisStore) rest(dest string, q *queue, tick *time.Timer) bool {
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
func (s *RedisStore) next(q *queue, buf []*request) []*request {
	batch := buf[:0]
	keys, i := 0, 0
	for ; i < len(q.waiting) && len(batch) < maxBatch; i++ {
		r := q.waiting[i]
		if r.gone.Load() {
			s.running.Add(-1) // never sent
			continue
		}
		if len(batch) > 0 && keys+len(r.policies) > maxBatchKeys {
			break
		}
		batch = append(batch, r)
		keys += len(r.policies)
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
// error) in it: one script call for the batch — of transport.TokenBuckets on a
// standalone Redis or a Ring shard, of transport.TokenBucketsAcross on a Cluster
// node — or, where a node refuses that (Redis before 7, a slot on the
// move), a pipeline of one call per subject. It keeps how that went in
// dest's lastCall, whoever sent it (a carrier, or a lone caller).
func (s *RedisStore) send(ctx context.Context, dest string, batch []*request) {
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
	if !s.split || len(batch) == 1 {
		keys, args := s.encodeShort(ctx, call, batch)
		reply, err := transport.TokenBuckets.Run(ctx, s.client, keys, args...).Text()
		s.settle(ctx, batch, call, reply, err)
		return
	}
	node := s.nodeClient(batch[0].subj)
	if node != nil && s.sendNode(ctx, node, call, batch) {
		return
	}
	s.sendEach(ctx, node, call, batch)
}

// sendNode decides batch in one script call on node, the Redis server of
// every subject in it; it reports false, having changed nothing, when
// the node did not run the script.
func (s *RedisStore) sendNode(ctx context.Context, node *redis.Client, call uint64, batch []*request) bool {
	script := transport.TokenBuckets // a Ring shard is a Redis of its own
	if _, ok := s.client.(*redis.ClusterClient); ok {
		if s.noAcross.Load() {
			return false
		}
		script = transport.TokenBucketsAcross
	}
	keys, args := s.encode(ctx, call, batch)
	if script == transport.TokenBucketsAcross {
		n := len(keys) - 1
		for _, k := range keys[:n] {
			args = append(args, k)
		}
		keys, args = keys[n:], append(args, n)
	}
	reply, err := script.Run(ctx, node, keys, args...).Text()
	switch {
	case transport.NoScriptFlags(err):
		s.noAcross.Store(true)
		return false
	case transport.NotRun(err) || redis.HasErrorPrefix(err, "Script attempted to"):
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
func (s *RedisStore) sendEach(ctx context.Context, node *redis.Client, call uint64, batch []*request) {
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
			cmds[i] = transport.TokenBuckets.EvalSha(ctx, pipe, keys[i], args[i]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, g := range groups {
		if cmds[i] == nil || transport.NotRun(cmds[i].Err()) {
			if keys[i] == nil {
				keys[i], args[i] = s.encodeShort(ctx, s.idSeq.Add(1), g)
			}
			cmds[i] = transport.TokenBuckets.Run(ctx, s.client, keys[i], args[i]...)
		}
		reply, err := cmds[i].Text()
		s.settle(ctx, g, call, reply, err)
	}
}

// nodeClient returns the client of the Redis server that decides subj (a
// subject passed through transport.HashSubject), or nil before the slot map is
// known.
func (s *RedisStore) nodeClient(subj string) *redis.Client {
	if !s.ready.Load() {
		return nil
	}
	// The node of the keys' hash tag, {subj}: subj hashes as {subj} does,
	// having no braces (transport.HashSubject), and costs no allocation.
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
		i, ok := at[r.subj]
		if !ok {
			i = len(groups)
			at[r.subj] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// encode returns the keys and arguments of one transport.TokenBuckets call deciding
// batch, whose id is call.
func (s *RedisStore) encode(ctx context.Context, call uint64, batch []*request) ([]string, []any) {
	keys := make([]string, 0, 1+len(batch)*len(batch[0].policies))
	var polBuf [8]*bucket.Policy
	var idxBuf [16]int
	pols, idx := polBuf[:0], idxBuf[:0]
	// Room for the policies and one run: a batch's requests are alike.
	args := make([]any, 4, 9+2*len(batch[0].policies))
	for _, r := range batch {
		for i := range r.policies {
			p := &r.policies[i]
			keys = append(keys, s.key(r.subj, p.Name))
			d, j := p.Desc(), 0
			for j < len(pols) && pols[j] != p && pols[j].Desc() != d {
				j++
			}
			if j == len(pols) {
				pols = append(pols, p)
				args = append(args, p.Arg())
			}
			idx = append(idx, j+1)
		}
	}
	var again int
	args, again = repeats(keys, args)
	keys = append(keys, s.recordKey(batch[0].subj, call))
	args[0], args[1], args[2], args[3] = recordTTL(ctx), len(batch), len(pols), again
	// Requests in a row that share their operation, cost and policies go
	// as one run: the shape once, then how many.
	for len(batch) > 0 {
		r, m := batch[0], len(batch[0].policies)
		run := 1
		for run < len(batch) && sameShape(r, batch[run], idx[:m], idx[run*m:]) {
			run++
		}
		op, x := bucket.SplitOp(r.op)
		args = append(args, op, r.n, m)
		for _, j := range idx[:m] {
			args = append(args, j)
		}
		args = append(args, run)
		if op > bucket.OpRefund {
			args = append(args, x)
		}
		// Requests in a run have m policies each.
		batch, idx = batch[run:], idx[run*m:]
	}
	return keys, args
}

// repeats appends to args, for each of keys that an earlier one repeats
// (requests of one subject), its position and its previous one's, from
// 1, and returns how many keys repeat.
func repeats(keys []string, args []any) ([]any, int) {
	n := 0
	if len(keys) <= 16 {
		for i := 1; i < len(keys); i++ {
			for j := i - 1; j >= 0; j-- {
				if keys[j] == keys[i] {
					args = append(args, i+1, j+1)
					n++
					break
				}
			}
		}
		return args, n
	}
	last := make(map[string]int, len(keys))
	for i, k := range keys {
		if j, ok := last[k]; ok {
			args = append(args, i+1, j+1)
			n++
		}
		last[k] = i
	}
	return args, n
}

// encodeShort is encode for transport.TokenBuckets, whose lone take under one
// policy has arguments of its own: the record's expiry, the policy, n.
func (s *RedisStore) encodeShort(ctx context.Context, call uint64, batch []*request) ([]string, []any) {
	r := batch[0]
	if len(batch) > 1 || len(r.policies) > 1 || r.op != bucket.OpTake {
		return s.encode(ctx, call, batch)
	}
	p := &r.policies[0]
	return []string{s.key(r.subj, p.Name), s.recordKey(r.subj, call)}, []any{recordTTL(ctx), p.Arg(), r.n}
}

// sameShape reports whether b, whose policies' indexes start at bi, asks
// what a, with indexes ai, asks (of other buckets). bi holds at least
// b's indexes.
func sameShape(a, b *request, ai, bi []int) bool {
	if b.op != a.op || b.n != a.n || len(b.policies) != len(a.policies) {
		return false
	}
	for i, j := range ai {
		if bi[i] != j {
			return false
		}
	}
	return true
}

// recordKey names the replay record of call, in subj's slot. The space
// after the hash tag keeps it apart from every bucket (a policy name has
// none).
func (s *RedisStore) recordKey(subj string, call uint64) string {
	var b [128]byte
	k := append(b[:0], s.prefix...)
	k = append(k, '{')
	k = append(k, subj...)
	k = append(k, "} "...)
	k = append(k, s.idBase...)
	return string(strconv.AppendUint(k, call, 36))
}

// recordTTL is how long (s) a call's replay record is kept: past any
// re-send of the call, which go-redis makes only before ctx's deadline.
func recordTTL(ctx context.Context) int {
	if d, ok := ctx.Deadline(); ok {
		return 2 + int(max(0, time.Until(d)+time.Second-1)/time.Second)
	}
	return 12
}

// settle leaves the answers of one script call, or its error, in batch.
func (s *RedisStore) settle(ctx context.Context, batch []*request, call uint64, reply string, err error) {
	if err != nil {
		last := err // a copy, so that err itself is not allocated on every call
		s.lastErr.Store(&last)
		if c, ok := s.client.(*redis.ClusterClient); ok && !transport.SlotMoving(err) {
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
		w := 1 + 3*len(r.policies)
		if op, _ := bucket.SplitOp(r.op); op > bucket.OpRefund {
			w++ // bucket.Outcome.Extra
		}
		end := transport.FieldsEnd(reply, w)
		if end < 0 {
			r.err = fmt.Errorf("%w: %q for %d decisions", ErrBadReply, transport.Truncate(reply), len(batch))
			continue
		}
		r.reply, reply = reply[:end], reply[min(end+1, len(reply)):]
	}
}

// fail gives every request of batch not yet answered the error of call.
func (s *RedisStore) fail(batch []*request, call uint64, err error) {
	var ce *callError
	if !errors.As(err, &ce) {
		ce = &callError{call: call, err: err}
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
func (s *RedisStore) batchContext(batch []*request) context.Context {
	latest := time.Now().Add(minSend)
	ctx := batch[0].ctx
	for _, r := range batch {
		if r.deadline.IsZero() {
			if ctx.Done() != nil {
				ctx = context.WithoutCancel(ctx)
			}
			return ctx
		}
		if r.deadline.After(latest) {
			latest = r.deadline
		}
	}
	return s.clock.Context(ctx, latest)
}

// minSend is the least time a script call is given.
const minSend = time.Second
