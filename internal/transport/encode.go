package transport

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// How a batch becomes one script call: its keys and arguments (see
// TokenBuckets for their layout).

// encode returns the keys and arguments of one TokenBuckets call deciding
// batch, whose id is call.
func (s *Store) encode(ctx context.Context, call uint64, batch []*request) ([]string, []any) {
	keys := make([]string, 0, 1+len(batch)*len(batch[0].Policies))
	var polBuf [8]*bucket.Policy
	var idxBuf [16]int
	pols, idx := polBuf[:0], idxBuf[:0]
	// Room for the policies and one run: a batch's requests are alike.
	args := make([]any, 4, 9+2*len(batch[0].Policies))
	for _, r := range batch {
		for i := range r.Policies {
			p, subj := &r.Policies[i], r.Subj
			if r.Across != nil {
				subj = r.Across[i].Subj
			}
			keys = append(keys, s.Key(subj, p.Name))
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
	keys = append(keys, s.recordKey(batch[0].Subj, call))
	args[0], args[1], args[2], args[3] = recordTTL(ctx), len(batch), len(pols), again
	// Requests in a row that share their operation, cost and policies go
	// as one run: the shape once, then how many.
	for len(batch) > 0 {
		r, m := batch[0], len(batch[0].Policies)
		run := 1
		for run < len(batch) && sameShape(r, batch[run], idx[:m], idx[run*m:]) {
			run++
		}
		op, x := bucket.SplitOp(r.Op)
		switch {
		case r.Across != nil:
			op += acrossOp
		case op == bucket.OpLend:
			op = lendOp
		}
		args = append(args, op, r.N, m)
		for _, j := range idx[:m] {
			args = append(args, j)
		}
		args = append(args, run)
		switch {
		case r.Across != nil:
			for _, p := range r.Across {
				args = append(args, p.N)
			}
		case op == lendOp:
			ln := r.Lend
			args = append(args, x, loanID(ln.Return), loanID(ln.ID))
			for i := range ln.Want {
				args = append(args, ln.Back[i], ln.Want[i])
			}
		case op > bucket.OpRefund:
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

// encodeShort is encode for TokenBuckets, whose plain takes have
// arguments of their own: a batch of takes of one cost n under one policy,
// one request per bucket (a lone take among them; a take across one
// bucket's too: see TestLoneAcrossOneBucket), sends the record's expiry,
// the policy and n; a batch of takes across subjects alike (a lone one
// among them; a bucket may be asked by several), the record's expiry,
// "A", then each bucket's policy and cost.
func (s *Store) encodeShort(ctx context.Context, call uint64, batch []*request) ([]string, []any) {
	r := batch[0]
	if r.Op != bucket.OpTake || len(r.Policies) > 1 && r.Across == nil {
		return s.encode(ctx, call, batch)
	}
	if p, n, ok := plainTake(r); ok {
		keys := make([]string, len(batch), len(batch)+1)
		keys[0] = s.Key(r.Subj, p.Name)
		for i, o := range batch[1:] {
			q, m, ok := plainTake(o)
			if !ok || m != n || q != p && q.Desc() != p.Desc() {
				return s.encode(ctx, call, batch)
			}
			keys[i+1] = s.Key(o.Subj, q.Name)
		}
		if len(batch) > 1 {
			if _, again := repeats(keys, nil); again > 0 {
				return s.encode(ctx, call, batch)
			}
		}
		return append(keys, s.recordKey(r.Subj, call)), []any{recordTTL(ctx), p.Arg(), n}
	}
	keys, args := make([]string, 0, len(batch)*len(r.Policies)+1), make([]any, 2, 2+2*len(r.Policies))
	for i := range r.Policies {
		args = append(args, r.Policies[i].Arg(), r.Across[i].N)
	}
	for _, o := range batch {
		if o != r && !sameAcross(r, o) {
			return s.encode(ctx, call, batch)
		}
		for i := range o.Policies {
			keys = append(keys, s.Key(o.Across[i].Subj, o.Policies[i].Name))
		}
	}
	args[0], args[1] = recordTTL(ctx), "A"
	return append(keys, s.recordKey(r.Subj, call)), args
}

// sameAcross reports whether b, like a, is a take across subjects of the
// same policies and costs (of other buckets).
func sameAcross(a, b *request) bool {
	if b.Op != bucket.OpTake || len(b.Across) != len(a.Across) || len(b.Policies) != len(a.Policies) {
		return false
	}
	for i := range a.Across {
		p, q := &a.Policies[i], &b.Policies[i]
		if b.Across[i].N != a.Across[i].N || p != q && p.Desc() != q.Desc() {
			return false
		}
	}
	return true
}

// plainTake returns the policy and cost of r if it is a plain take: under
// one policy, or across one bucket (an Envoy request of one descriptor) of
// a cost.
func plainTake(r *request) (*bucket.Policy, int, bool) {
	if r.Op != bucket.OpTake || len(r.Policies) != 1 {
		return nil, 0, false
	}
	if r.Across == nil {
		return &r.Policies[0], r.N, true
	}
	if len(r.Across) == 1 && r.Across[0].N > 0 { // Subj is Across[0].Subj
		return &r.Policies[0], r.Across[0].N, true
	}
	return nil, 0, false
}

// sameShape reports whether b, whose policies' indexes start at bi, asks
// what a, with indexes ai, asks (of other buckets). bi holds at least
// b's indexes. Requests across subjects are alike when their buckets'
// costs are too (a run gives them once): an Envoy service's requests of
// one route, say, each of the same descriptors.
func sameShape(a, b *request, ai, bi []int) bool {
	if b.Op != a.Op || b.N != a.N || len(b.Policies) != len(a.Policies) || (a.Across == nil) != (b.Across == nil) || a.Lend != nil {
		return false
	}
	for i, j := range ai {
		if bi[i] != j {
			return false
		}
	}
	for i := range a.Across {
		if b.Across[i].N != a.Across[i].N {
			return false
		}
	}
	return true
}

// acrossOp is added to a take's or refund's operation across subjects
// (see TokenBuckets).
const acrossOp = 7

// lendOp is bucket.OpLend's operation in TokenBuckets.
const lendOp = 12

// loanID is a loan's id as TokenBuckets keeps it: "-" for none.
func loanID(id uint64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatUint(id, 36)
}

// recordKey names the replay record of call, in subj's slot. The space
// after the hash tag keeps it apart from every bucket (a policy name has
// none).
func (s *Store) recordKey(subj string, call uint64) string {
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
