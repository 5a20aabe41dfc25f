package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Natural batching (WithBatching). Every decision stays atomic, decided by
// the same bucket arithmetic as without batching; what changes is how
// decisions travel.
// While no batch of a store is in flight, a decision is sent at once, alone,
// exactly as without batching: a lone caller never waits for company. While
// one is in flight, arriving decisions queue; when it returns, the caller
// that sent it hands the lead to the first one queued, which sends the whole
// queue at once: to a standalone Redis as one script call deciding them in
// turn (tokenBuckets), to a Cluster or Ring as one go-redis pipeline. No
// timer, no added delay: the batch size follows the concurrency. Redis then
// parses one command and runs one script for many decisions, and the client
// makes one round trip (one pool checkout, one write and one read syscall)
// for them all: on a CPU-bound machine that is most of the cost of a
// decision.
//
// Bounds: a queued caller waits on its own context (the limiter's deadline
// context for a client with ContextTimeoutEnabled; otherwise its worker is
// abandoned by the caller at Config.Timeout as always). One whose context
// ends before its decision was sent leaves the queue and never reaches
// Redis; one whose decision was already sent drops the answer, which may
// have counted — like any timed-out decision, that can only deny early,
// never admit more.

// batcher queues the decisions of one RedisStore.
type batcher struct {
	mu    sync.Mutex
	busy  bool       // a leader is sending or about to send a batch
	queue []*pending // decisions waiting for the next batch, in arrival order
	spare []*pending // the last batch's slice, reused for the next queue

	oneScript bool // a standalone Redis: a batch is one tokenBuckets call
}

// Pending states; changed only under batcher.mu.
const (
	pendQueued    = iota // in queue, not yet sent
	pendLead             // woken to send the next batch
	pendSent             // in a batch in flight
	pendDone             // its command has an answer (or error)
	pendAbandoned        // sent, but its caller gave up: the leader recycles it
)

// pending is one decision in a batch. Pooled.
type pending struct {
	keys   []string
	args   []any
	reply  []any // the script's answer for this decision, or
	err    error // why there is none
	cmd    *redis.Cmd
	state  int
	wake   chan struct{} // buffered 1: pendDone or pendLead was set
	keyBuf [1]string
}

// errBatchFailed answers the decisions of a batch whose sending panicked.
var errBatchFailed = errors.New("core: the Redis client panicked sending this decision's batch")

var pendingPool = sync.Pool{New: func() any { return &pending{wake: make(chan struct{}, 1)} }}

func (p *pending) recycle() {
	p.keyBuf[0] = ""
	p.keys, p.args, p.reply, p.err, p.cmd = nil, nil, nil, nil, nil
	select { // a wake-up never received (the caller gave up as it came)
	case <-p.wake:
	default:
	}
	pendingPool.Put(p)
}

// WithBatching makes the store send decisions that arrive while another of
// its decisions is in flight together, in one round trip, as soon as that
// one returns: to a standalone Redis one script call decides them all in
// turn, to a Cluster or Ring one pipeline carries a script call for each. A
// decision made with nothing in flight is sent at once, alone, as without
// this option, so a lone caller pays nothing; under concurrency Redis and
// the client spend much less CPU per decision. Each decision is still
// atomic, decided by the same bucket arithmetic; limits are exactly as
// enforced as without batching. Default off.
//
// Batches are per store: limiters sharing a store share its batches. Every
// caller still waits at most Config.Timeout; a batch is sent under the
// deadline of the caller sending it, so a batch that times out fails every
// decision in it, each then decided by FailMode. A caller that gives up
// while its decision is in flight drops the answer, which may have counted:
// as for any timed-out decision, that can deny early, never admit more.
func WithBatching() RedisOption {
	return func(s *RedisStore) {
		_, standalone := s.client.(*redis.Client)
		s.batch = &batcher{oneScript: standalone}
	}
}

// takeBatched is Take in batching mode; arguments are checked.
func (s *RedisStore) takeBatched(ctx context.Context, subj string, n int, policies []Policy, each []Outcome) (Outcome, error) {
	p := pendingPool.Get().(*pending)
	if len(policies) == 1 {
		p.keyBuf[0] = s.key(subj, policies[0].Name)
		p.keys = p.keyBuf[:]
		if n == 1 && policies[0].argv1 != nil {
			p.args = policies[0].argv1
		}
	} else {
		p.keys = s.keys(subj, policies)
	}
	if p.args == nil {
		p.args = scriptArgs(n, policies)
	}

	b := s.batch
	b.mu.Lock()
	if !b.busy {
		// Nothing in flight: send it now, alone.
		b.busy = true
		p.state = pendSent
		b.mu.Unlock()
		sent := false
		defer func() {
			if !sent { // the client panicked: free the lead, then re-panic
				b.finish(nil, p)
			}
		}()
		p.reply, p.err = tokenBucket.Run(ctx, s.client, p.keys, p.args...).Slice()
		sent = true
		b.finish(nil, p)
		return p.result(each)
	}
	p.state = pendQueued
	b.queue = append(b.queue, p)
	b.mu.Unlock()

	select {
	case <-p.wake:
	case <-ctx.Done():
	}
	b.mu.Lock()
	switch p.state {
	case pendDone:
		b.mu.Unlock()
		return p.result(each)
	case pendSent:
		// In flight: the leader recycles p when the batch returns.
		p.state = pendAbandoned
		b.mu.Unlock()
		return Outcome{}, ctx.Err()
	case pendQueued:
		b.remove(p)
		b.mu.Unlock()
		p.recycle()
		return Outcome{}, ctx.Err()
	}
	// pendLead: send the queue (p first in it), unless our time is up.
	if err := ctx.Err(); err != nil {
		b.remove(p)
		b.handOff()
		b.mu.Unlock()
		p.recycle()
		return Outcome{}, err
	}
	batch := b.take()
	b.mu.Unlock()
	sent := false
	defer func() {
		if !sent { // the client panicked: the batch failed; free the lead, re-panic
			b.finish(batch, p)
		}
	}()
	s.send(sendContext(ctx), batch)
	sent = true
	b.finish(batch, p)
	return p.result(each)
}

// maxBatch bounds the decisions in one batch; more wait for the next.
const maxBatch = 256

// take moves the first maxBatch queued decisions into a batch (the leader's
// own first) and marks them sent. b.mu is held.
func (b *batcher) take() []*pending {
	var batch []*pending
	if len(b.queue) <= maxBatch {
		batch = b.queue
		b.queue = b.spare[:0]
	} else {
		batch = append(b.spare[:0], b.queue[:maxBatch]...)
		n := copy(b.queue, b.queue[maxBatch:])
		clear(b.queue[n:])
		b.queue = b.queue[:n]
	}
	b.spare = nil
	for _, q := range batch {
		q.state = pendSent
	}
	return batch
}

// sendContext is the context a batch is sent with. The limiter's deadline
// context (a client with ContextTimeoutEnabled) ends only at its deadline,
// which bounds the batch as it bounds its sender. Any other context is the
// caller's own, and its cancellation (a client that went away) must not
// fail the decisions of the other callers in the batch: it is sent without
// it. The limiter still bounds every caller's wait by Config.Timeout (its
// worker, not the caller, is the one left waiting); a context with a
// deadline keeps it.
func sendContext(ctx context.Context) context.Context {
	if _, ok := ctx.(*boundedCtx); ok || ctx.Done() == nil {
		return ctx
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// send decides batch and leaves each decision's answer (or error) in it.
// A lone decision is one script call. To a standalone Redis (a Client,
// Sentinel's included) a batch is one call of tokenBuckets, which decides
// them all in turn: Redis parses one command and runs one script for them
// all. Elsewhere (Cluster, Ring: the keys live in different slots and
// shards) it is one pipeline of EVALSHAs, and then EVALs, once, for only
// the commands Redis refused with NOSCRIPT: those were not run, so nothing
// is counted twice.
func (s *RedisStore) send(ctx context.Context, batch []*pending) {
	for _, p := range batch {
		p.err = errBatchFailed // until answered: the client may panic
	}
	switch {
	case len(batch) == 1:
		p := batch[0]
		p.reply, p.err = tokenBucket.Run(ctx, s.client, p.keys, p.args...).Slice()
	case s.batch.oneScript && batchKeys(batch) <= maxScriptKeys:
		s.sendScript(ctx, batch)
	default:
		s.sendPipeline(ctx, batch)
	}
}

// maxScriptKeys bounds the keys of one tokenBuckets call (Lua's unpack
// takes at most about 8000); a batch of requests with many policies each
// goes as a pipeline instead.
const maxScriptKeys = 4096

func batchKeys(batch []*pending) int {
	n := 0
	for _, p := range batch {
		n += len(p.keys)
	}
	return n
}

// sendScript decides batch with one call of tokenBuckets, or, when its
// requests have more than maxScriptPolicies distinct policies between them,
// with a pipeline.
func (s *RedisStore) sendScript(ctx context.Context, batch []*pending) {
	nk := batchKeys(batch)
	keys := make([]string, 0, nk)
	idx := make([]int, 0, nk)
	args := make([]any, 2, 2+3*2+2*len(batch)+nk)
	np := 0
	for _, p := range batch {
		keys = append(keys, p.keys...)
		for i := range p.keys {
			pol := p.args[1+3*i : 4+3*i]
			j := 0
			for j < np && !slices.Equal(args[2+3*j:5+3*j], pol) {
				j++
			}
			if j == np {
				if np == maxScriptPolicies {
					s.sendPipeline(ctx, batch)
					return
				}
				args = append(args, pol...)
				np++
			}
			idx = append(idx, j+1)
		}
	}
	args[0], args[1] = len(batch), np
	for _, p := range batch {
		args = append(args, len(p.keys), p.args[0])
		for _, j := range idx[:len(p.keys)] {
			args = append(args, j)
		}
		idx = idx[len(p.keys):]
	}
	reply, err := tokenBuckets.Run(ctx, s.client, keys, args...).Slice()
	off := 0
	for _, p := range batch {
		w := 1 + 3*len(p.keys)
		switch {
		case err != nil:
			p.reply, p.err = nil, err
		case off+w > len(reply):
			p.reply, p.err = nil, fmt.Errorf("%w: %d values for %d decisions", ErrBadReply, len(reply), len(batch))
		default:
			p.reply, p.err = reply[off:off+w:off+w], nil
		}
		off += w
	}
}

// maxScriptPolicies bounds the distinct policies of one tokenBuckets call.
const maxScriptPolicies = 32

// sendPipeline decides batch with one pipeline of EVALSHAs.
func (s *RedisStore) sendPipeline(ctx context.Context, batch []*pending) {
	pipe := s.client.Pipeline()
	for _, p := range batch {
		p.cmd = tokenBucket.EvalSha(ctx, pipe, p.keys, p.args...)
	}
	_, _ = pipe.Exec(ctx)
	var retry redis.Pipeliner
	for _, p := range batch {
		if redis.HasErrorPrefix(p.cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = s.client.Pipeline()
			}
			p.cmd = tokenBucket.Eval(ctx, retry, p.keys, p.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for _, p := range batch {
		p.reply, p.err = p.cmd.Slice()
		p.cmd = nil
	}
}

// finish answers batch's waiting callers (the leader reads its own
// decision, self), then hands the lead to the first decision queued
// meanwhile, or marks the store idle.
func (b *batcher) finish(batch []*pending, self *pending) {
	var drop []*pending
	b.mu.Lock()
	for _, q := range batch {
		if q == self {
			continue
		}
		if q.state == pendAbandoned {
			drop = append(drop, q)
			continue
		}
		q.state = pendDone
		q.wake <- struct{}{}
	}
	if batch != nil {
		clear(batch)
		b.spare = batch[:0]
	}
	b.handOff()
	b.mu.Unlock()
	for _, q := range drop {
		q.recycle()
	}
}

// handOff wakes the first queued decision to send the next batch, or marks
// the store idle. b.mu is held.
func (b *batcher) handOff() {
	if len(b.queue) == 0 {
		b.busy = false
		return
	}
	q := b.queue[0]
	q.state = pendLead
	q.wake <- struct{}{}
}

// remove takes p out of the queue. b.mu is held.
func (b *batcher) remove(p *pending) {
	for i, q := range b.queue {
		if q == p {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			return
		}
	}
}

// result reads p's answer and recycles p.
func (p *pending) result(each []Outcome) (Outcome, error) {
	reply, err := p.reply, p.err
	p.recycle()
	if err != nil {
		return Outcome{}, err
	}
	return parseReply(reply, each)
}
