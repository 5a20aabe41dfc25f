package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
	"github.com/sluicehq/ratelimit/internal/redistest"
)

// acrossReq is a take across subjects: part i takes costs[i] of subjs[i]
// under policy i.
func acrossReq(subjs []string, costs []int, ps []bucket.Policy) *request {
	a := bucket.Ask{Subj: bucket.HashSubject(subjs[0]), Op: bucket.OpTake, Policies: ps, Each: make([]bucket.Outcome, len(ps))}
	for i, s := range subjs {
		a.Across = append(a.Across, bucket.Part{Subj: bucket.HashSubject(s), N: costs[i]})
	}
	return &request{ctx: context.Background(), Ask: a}
}

// TestBatchAcrossRuns: requests across subjects that take the same costs
// of the same policies go as one run (their shape once), others as runs
// of their own; either way each is decided as when it is sent alone.
func TestBatchAcrossRuns(t *testing.T) {
	ps := mustPolicies(t, NamedLimit{Name: "x", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 20}}, NamedLimit{Name: "z", Limit: Limit{Rate: 1, Period: time.Hour, Burst: 40}})
	s := New(redistest.Client(t), "p:")
	alike := []*request{
		acrossReq([]string{"a", "t"}, []int{1, 1}, ps),
		acrossReq([]string{"b", "t"}, []int{1, 1}, ps),
		acrossReq([]string{"c", "u"}, []int{1, 1}, ps),
		acrossReq([]string{"d", "u"}, []int{2, 1}, ps),
	}
	_, args := s.encode(context.Background(), 1, alike)
	// The runs: op, n, m, m policy indexes, the count, then the m costs.
	runs := args[4+2+2*args[3].(int):]
	want := []any{8, 0, 2, 1, 2, 3, 1, 1, 8, 0, 2, 1, 2, 1, 2, 1}
	if !slices.Equal(runs, want) {
		t.Fatalf("runs %v, want %v", runs, want)
	}

	for name, c := range scriptServers(t) {
		t.Run(name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			batched, single := New(c, prefix+"b:"), New(c, prefix+"s:")
			rng := rand.New(rand.NewPCG(3, 4))
			allowed, denied := 0, 0
			for range 40 {
				reqs := make([][2][]any, 1+rng.IntN(10))
				batch, alone := make([]*request, len(reqs)), make([]*request, len(reqs))
				for i := range reqs {
					subjs := []string{fmt.Sprint("s", rng.IntN(8)), fmt.Sprint("t", rng.IntN(2))}
					costs := []int{1 + rng.IntN(2), 1}
					batch[i], alone[i] = acrossReq(subjs, costs, ps), acrossReq(subjs, costs, ps)
				}
				batched.send(context.Background(), "", batch)
				for i := range batch {
					single.send(context.Background(), "", alone[i:i+1])
					g, w := batch[i], alone[i]
					if g.err != nil || w.err != nil {
						t.Fatal(g.err, w.err)
					}
					ge, we := make([]bucket.Outcome, 2), make([]bucket.Outcome, 2)
					go1, err1 := ParseReply(g.reply, ge)
					wo, err2 := ParseReply(w.reply, we)
					if err1 != nil || err2 != nil || go1.Allowed != wo.Allowed || !slices.EqualFunc(ge, we, func(a, b bucket.Outcome) bool { return a.Remaining == b.Remaining }) {
						t.Fatalf("request %d of %d: batched %q, alone %q", i, len(batch), g.reply, w.reply)
					}
					if wo.Allowed {
						allowed++
					} else {
						denied++
					}
				}
			}
			if allowed < 10 || denied < 10 {
				t.Fatalf("allowed %d, denied %d: the batches did not exercise both", allowed, denied)
			}
		})
	}
}
