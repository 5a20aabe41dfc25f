package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a RedisStore's decisions travel. Each caller puts its request in a
// queue and waits for its own answer, or its context's end. A queue's
// sender goroutine sends what is queued as one script call, hands out the
// answers, and sends again what queued meanwhile. So a lone decision
// leaves at once, alone, and under concurrency batches grow with the load:
// no timer, no added delay. A store's one queue has up to maxSenders
// senders, so one batch is encoded or decoded while another is in Redis;
// a queue per subject has one. A sender exits as soon as its queue is
// empty.

// request is one decision waiting in a queue.
type request struct {
	ctx      context.Context // deadline and values; its cancellation is the caller's alone
	subj     string          // passed through hashSubject
	op       int             // opTake, opPeek or opRefund
	n        int
	policies []Policy

	reply []any // the script's answer for this request, or
	err   error // why there is none; both set before done closes
	done  chan struct{}
	gone  atomic.Bool // the caller stopped waiting: not sent if not yet sent
}

// Operations of the script on one request.
const (
	opTake   = 1
	opPeek   = 2
	opRefund = 3
)

// queue holds the requests for one destination (see RedisStore.queues).
// Its fields are guarded by the store's mu.
type queue struct {
	waiting []*request
	sending int // script calls in flight, by senders or inline
	senders int // sender goroutines running for this queue
}

// maxSenders bounds the batches of a store's one queue in flight at once.
const maxSenders = 2

// Bounds of one script call: Lua's unpack takes about 8000 values.
const (
	maxBatch     = 256
	maxBatchKeys = 4096
)

// enqueue queues r, starting its queue's sender if none is running, or,
// when nothing is queued or in flight and the client bounds its calls by
// r's deadline, reports that r goes alone on its caller's goroutine: a
// lone caller then pays no hand-off to a sender and back.
func (s *RedisStore) enqueue(r *request) (q *queue, inline bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q = s.queues[s.dest(r)]
	if q == nil {
		q = &queue{}
		s.queues[s.dest(r)] = q
	}
	if s.inline && q.sending == 0 && len(q.waiting) == 0 {
		if _, ok := r.ctx.Deadline(); ok {
			q.sending++
			return q, true
		}
	}
	r.done = make(chan struct{})
	q.waiting = append(q.waiting, r)
	if q.senders == 0 || (!s.split && q.senders < maxSenders) {
		q.senders++
		go s.drain(s.dest(r), q)
	}
	return q, false
}

// dest names r's queue: its subject for a Cluster or Ring, else "".
func (s *RedisStore) dest(r *request) string {
	if s.split {
		return r.subj
	}
	return ""
}

// sendAlone sends r, which enqueue let go inline on q, under r's own
// deadline.
func (s *RedisStore) sendAlone(q *queue, r *request) {
	s.send(r.ctx, []*request{r})
	s.mu.Lock()
	q.sending--
	s.forget(s.dest(r), q)
	s.mu.Unlock()
}

// forget drops a subject's queue once nothing uses it. s.mu is held.
func (s *RedisStore) forget(dest string, q *queue) {
	if s.split && q.senders == 0 && q.sending == 0 && len(q.waiting) == 0 && s.queues[dest] == q {
		delete(s.queues, dest)
	}
}

// drain sends q's requests, a batch at a time, until q stays empty.
func (s *RedisStore) drain(dest string, q *queue) {
	for {
		s.mu.Lock()
		batch := s.next(q)
		if batch == nil {
			q.senders--
			s.forget(dest, q)
			s.mu.Unlock()
			return
		}
		q.sending++
		s.mu.Unlock()
		ctx, cancel := batchContext(batch)
		s.send(ctx, batch)
		cancel()
		for _, r := range batch {
			close(r.done)
		}
		s.mu.Lock()
		q.sending--
		s.mu.Unlock()
	}
}

// next takes the next batch off q, leaving out requests whose callers are
// gone; nil when nothing is left. s.mu is held.
func (s *RedisStore) next(q *queue) []*request {
	var batch []*request
	keys, i := 0, 0
	for ; i < len(q.waiting) && len(batch) < maxBatch; i++ {
		r := q.waiting[i]
		if r.gone.Load() {
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
	return batch
}

// send decides batch with one call of tokenBuckets under ctx and leaves
// each request's answer (or error) in it.
func (s *RedisStore) send(ctx context.Context, batch []*request) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("core: the Redis client panicked: %v", p)
			for _, r := range batch {
				if r.reply == nil && r.err == nil {
					r.err = err
				}
			}
		}
	}()
	keys := make([]string, 0, len(batch)*len(batch[0].policies))
	var polBuf [8]*Policy
	var idxBuf [16]int
	pols, idx := polBuf[:0], idxBuf[:0]
	args := make([]any, 3, 3+4*len(batch[0].policies)+4*len(batch))
	for _, r := range batch {
		for i := range r.policies {
			p := &r.policies[i]
			keys = append(keys, s.key(r.subj, p.Name))
			j := 0
			for j < len(pols) && pols[j] != p {
				j++
			}
			if j == len(pols) {
				pols = append(pols, p)
				args = append(args, p.args()...)
			}
			idx = append(idx, j+1)
		}
	}
	args[0], args[1], args[2] = s.nextID(), len(batch), len(pols)
	for _, r := range batch {
		args = append(args, len(r.policies), r.op, r.n)
		for _, j := range idx[:len(r.policies)] {
			args = append(args, j)
		}
		idx = idx[len(r.policies):]
	}
	reply, err := tokenBuckets.Run(ctx, s.client, keys, args...).Slice()
	if err == nil {
		if !s.ready.Load() {
			s.ready.Store(true)
		}
		if s.lastErr.Load() != nil {
			s.lastErr.Store(nil)
		}
	} else {
		last := err // a copy, so that err itself is not allocated on every call
		s.lastErr.Store(&last)
		if c, ok := s.client.(*redis.ClusterClient); ok {
			// A failed primary's slots move to its replica: read the new
			// map now, not at go-redis's next periodic refresh (60s).
			c.ReloadState(ctx)
		}
	}
	off := 0
	for _, r := range batch {
		w := 1 + 3*len(r.policies)
		switch {
		case err != nil:
			r.err = err
		case off+w > len(reply):
			r.err = fmt.Errorf("%w: %d values for %d decisions", ErrBadReply, len(reply), len(batch))
		default:
			r.reply = reply[off : off+w : off+w]
		}
		off += w
	}
}

// batchContext is the context a batch is sent under: the values of its
// first request, none of its callers' cancellation (one caller leaving
// must not fail the others), and the latest of their deadlines, but at
// least minSend from now: a caller waits only until its own deadline, and
// a call that outlives it can still learn why Redis fails (a dial error
// comes after go-redis's dial retries, longer than a typical Timeout) and
// report it to the next decisions.
func batchContext(batch []*request) (context.Context, context.CancelFunc) {
	latest := time.Now().Add(minSend)
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// minSend is the least time a script call is given.
const minSend = time.Second

// args returns p's script arguments: capacity, refill, unit, tick. Built
// once by Policies, they cost no allocation per call (see BENCHMARKS.md,
// "Tricks kept").
func (p *Policy) args() []any {
	if p.argv != nil {
		return p.argv
	}
	return []any{p.Capacity, p.Refill, p.Unit, p.Tick}
}
