package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/internal/policyname"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Headers names the response headers a Service asks Envoy to add
// (the reference's LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
type Headers struct {
	Limit, Remaining, Reset string
}

// DescriptorEvent describes one decided descriptor to
// ServiceConfig.OnDescriptor, for the reference's per-rule statistics.
type DescriptorEvent struct {
	Domain string
	// Key is the rule's FullKey; with detailed_metric, the request's
	// "domain.key_value…"; for a descriptor's own limit without a rule,
	// "domain.descriptor_limit" (never the request's keys or values).
	Key    string
	Hits   uint64 // the descriptor's hits
	Over   bool   // refused by this rule (enforced or not)
	Shadow bool   // refused, but shadow mode let the request through
	// Limit and Remaining are the status's requests_per_unit and
	// limit_remaining (the reference's near_limit compares them).
	Limit, Remaining uint32
}

// ServiceConfig configures a Service. Store is required; every other field
// has the default its comment gives for its zero value.
type ServiceConfig struct {
	// Store keeps the buckets: core.NewRedisStore to share them with
	// other replicas and apps, core.NewMemoryStore for one process.
	Store core.Store
	// Timeout bounds a request's store decision, through core's bound and
	// breakers. Default core.DefaultTimeout (50ms).
	Timeout time.Duration
	// FailMode is the answer when the store cannot decide. The zero value
	// answers a gRPC Unavailable error, so Envoy's failure_mode_deny
	// decides (as with the reference); core.FailOpen answers OK,
	// core.FailClosed OVER_LIMIT, core.FailLocal decides with in-process
	// buckets holding each limit divided by Instances.
	FailMode core.FailMode
	// Instances is the number of replicas sharing the limits; required
	// with FailLocal.
	Instances int
	// ShadowMode decides every request as usual and reports the statuses,
	// but answers OK overall (the reference's SHADOW_MODE).
	ShadowMode bool
	// Headers, if set, are the response headers added for the descriptor
	// closest to its limit (the first refused one on OVER_LIMIT). Reset is
	// duration_until_reset in whole seconds, rounded up.
	Headers *Headers
	// Observer sees every core decision (a metrics.Collector counts them by
	// policy, the rule's Name; "envoy-descriptor-limit" for descriptors'
	// own limits without a rule).
	Observer core.Observer
	// OnDescriptor, if set, is called for every descriptor a rule decided.
	// It must be fast and safe for concurrent use.
	OnDescriptor func(DescriptorEvent)
	// Logger receives core's degraded-decision lines. Default slog.Default().
	Logger *slog.Logger
}

// Service implements rlspb.RateLimitServiceServer on core's token buckets.
// It is safe for concurrent use; SetConfig swaps its config atomically.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	cfg    ServiceConfig
	config atomic.Pointer[Config]
	// limiter decides every rule, each through its view under the rule's
	// Name and limit (core's Under): one guard (breakers, bound, denial
	// cache, log line) for the service, whatever its rules.
	limiter *core.Limiter
}

const (
	// maxDescriptors bounds the descriptors of one request; more are
	// refused (InvalidArgument) before anything is decided.
	maxDescriptors = 256
	// ownName is the policy Name of descriptors' own limits without a
	// rule: their buckets' keys carry the domain and entry keys (see the
	// package doc, "Buckets"), so a request cannot create policy names or
	// metric series. It is the Service's limiter's Name, so its log lines
	// and breaker changes name it.
	ownName = "envoy-descriptor-limit"
)

// NewService checks cfg and returns a Service with an empty config (every
// descriptor unmatched: OK); SetConfig gives it rules.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("envoy: ServiceConfig.Store is nil")
	}
	if cfg.FailMode == core.FailLocal && cfg.Instances < 1 {
		return nil, errors.New("envoy: FailLocal needs ServiceConfig.Instances")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = core.DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fm := cfg.FailMode
	if fm == 0 {
		fm = core.FailOpen // Degraded results become gRPC errors
	}
	l, err := core.New(core.Config{
		Store: cfg.Store, Limit: core.PerSecond(1), Name: ownName, FailMode: fm, Instances: cfg.Instances,
		Timeout: cfg.Timeout, Observer: cfg.Observer, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	s := &Service{cfg: cfg, limiter: l}
	s.config.Store(&Config{domains: map[string]*node{}})
	return s, nil
}

// SetConfig makes c the config of the requests that start from now on.
// Buckets carry over: a rule whose limit changed keeps what was spent.
func (s *Service) SetConfig(c *Config) { s.config.Store(c) }

// plan is one descriptor's part of a request.
type plan struct {
	rule    *rule // nil: no rule matched and no limit of its own
	subject string
	metric  string
	lim     core.Limit
	current *rlspb.RateLimitResponse_RateLimit
	refuse  bool // requests_per_unit 0
	hits    uint64
	check   bool // hits 0: look, take nothing
	give    bool // is_negative_hits
	usage   bool
	shadow  bool

	l      *core.Limiter // deciding under lim; nil when the store is not asked
	at     int           // its check in the request's AllowAll; -1 none
	over   bool          // the rule refused it (enforced or, in shadow mode, not)
	status *rlspb.RateLimitResponse_DescriptorStatus
}

var errStore = status.Error(codes.Unavailable, "rate limit store unavailable")

// ShouldRateLimit decides a request's descriptors all or nothing, in one
// core.AllowAll (see the package doc). Its error is InvalidArgument for a
// request without a domain or descriptors, with more than 256 descriptors
// or a descriptor's limit that cannot be decided; Unavailable when the
// store could not decide and ServiceConfig.FailMode is not set; Canceled
// or DeadlineExceeded when the caller left before the decision. The
// statuses' current_limit of a configured rule is the config's, shared by
// every response: read it, never change it.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case n == 0:
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case n > maxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "%d rate limit descriptors: at most %d per request", n, maxDescriptors)
	}
	plans, err := s.plan(s.config.Load(), req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err() // gone: decide nothing
	}
	wait := s.giveBackAll(ctx, plans)
	refused, degraded, err := s.decide(ctx, plans)
	wait()
	if err != nil {
		return nil, err
	}
	if !degraded {
		s.account(ctx, plans, refused)
	}
	return s.response(req.Domain, plans, refused), nil
}

// decide decides the request's descriptors in one AllowAll and sets their
// statuses. refused says the request is refused (by a rule not in shadow
// mode); degraded that the store could not decide. A descriptor that
// always refuses (requests_per_unit 0) makes every check a look, so the
// others report their state and nothing is taken. When only rules in
// shadow mode refused, the request is decided again without them (a second
// call): they never refuse a request, yet the others take their hits.
func (s *Service) decide(ctx context.Context, plans []plan) (refused, degraded bool, err error) {
	checks, shadowed, refused := s.checks(plans)
	if len(checks) == 0 {
		return refused, false, nil
	}
	if refused {
		for i := range checks {
			checks[i].N = 0
		}
	}
	if s.cfg.ShadowMode || slices.Contains(shadowed, true) {
		// Observers count a refusal that is let through as would_deny (with
		// a rule in shadow mode, any refusal of the call).
		ctx = core.WithDryRun(ctx)
	}
	res, err := s.allowAll(ctx, checks)
	if err == nil && !refused && onlyShadowRefused(res, shadowed) {
		err = s.decideAgain(ctx, checks, res)
	}
	if err != nil {
		return false, false, err
	}
	over, degraded := s.statuses(plans, res)
	refused = refused || over
	if degraded && s.cfg.FailMode == 0 {
		return false, true, errStore
	}
	return refused, degraded, nil
}

// checks returns the checks of the plans the store decides, and per
// check whether its rule is in shadow mode. A plan that always refuses
// gets its status here; refused says one refused the request.
func (s *Service) checks(plans []plan) (checks []core.Check, shadowed []bool, refused bool) {
	for i := range plans {
		p := &plans[i]
		p.at = -1
		switch {
		case p.rule == nil || p.afterTheFact():
		case p.refuse:
			p.over = true
			p.status = s.status(p, rlspb.RateLimitResponse_OVER_LIMIT, core.Result{})
			refused = refused || !p.shadow
		default:
			n := clampInt(p.hits)
			if p.check {
				n = 0
			}
			p.at = len(checks)
			checks = append(checks, core.Check{Limiter: p.l, Key: p.subject, N: n})
			shadowed = append(shadowed, p.shadow)
		}
	}
	return checks, shadowed, refused
}

// decideAgain decides again the checks res allowed, when only rules in
// shadow mode refused, and puts their new results in res.
func (s *Service) decideAgain(ctx context.Context, checks []core.Check, res []core.Result) error {
	var again []int // the checks decided again
	var retry []core.Check
	for i, r := range res {
		if r.Allowed {
			again, retry = append(again, i), append(retry, checks[i])
		}
	}
	if len(retry) == 0 {
		return nil
	}
	res2, err := s.allowAll(ctx, retry)
	if err != nil {
		return err
	}
	for k, i := range again {
		res[i] = res2[k]
	}
	return nil
}

// statuses sets the status of each plan the store decided from its result
// in res: refused when a rule not in shadow mode refused, degraded when
// one result is.
func (s *Service) statuses(plans []plan, res []core.Result) (refused, degraded bool) {
	for i := range plans {
		p := &plans[i]
		if p.at < 0 {
			continue
		}
		r := res[p.at]
		degraded = degraded || r.Degraded
		code := rlspb.RateLimitResponse_OK
		if !r.Allowed {
			code = rlspb.RateLimitResponse_OVER_LIMIT
			p.over = true
			refused = refused || !p.shadow
		}
		if p.over && p.shadow {
			code = rlspb.RateLimitResponse_OK // reported as the reference does
		}
		p.status = s.status(p, code, r)
	}
	return refused, degraded
}

// onlyShadowRefused reports whether some check was refused and every
// refused one is of a rule in shadow mode, none degraded.
func onlyShadowRefused(res []core.Result, shadowed []bool) bool {
	some := false
	for i, r := range res {
		if r.Degraded || (!r.Allowed && !shadowed[i]) {
			return false
		}
		some = some || !r.Allowed
	}
	return some
}

// allowAll is core.AllowAll; a caller's mistake it finds (two descriptors
// of one bucket under different limits) is the request's.
func (s *Service) allowAll(ctx context.Context, checks []core.Check) ([]core.Result, error) {
	_, res, err := core.AllowAll(ctx, checks...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "rate limit descriptors: %v", err)
	}
	return res, nil
}

// giveBackAll gives back the hits of the descriptors that give them
// (is_negative_hits), whatever the answer: beside the decision, so a
// stalled store delays the answer once. wait waits for them.
func (s *Service) giveBackAll(ctx context.Context, plans []plan) (wait func()) {
	var wg *sync.WaitGroup // none, most often
	for i := range plans {
		if p := &plans[i]; p.give && p.l != nil {
			if wg == nil {
				wg = new(sync.WaitGroup)
			}
			wg.Go(func() { s.giveBack(ctx, p) })
		}
	}
	if wg == nil {
		return func() {}
	}
	return wg.Wait
}

// account charges usage, all at once, in an admitted request (a refused
// request charges nothing: its usage descriptors report their state).
// Usage is never refused; a store that fails here loses the charge.
func (s *Service) account(ctx context.Context, plans []plan, refused bool) {
	var wg *sync.WaitGroup // none, most often
	for i := range plans {
		if p := &plans[i]; p.l != nil && p.charges() {
			if wg == nil {
				wg = new(sync.WaitGroup)
			}
			wg.Go(func() {
				if refused {
					s.look(ctx, p)
				} else {
					s.charge(ctx, p)
				}
			})
		}
	}
	if wg != nil {
		wg.Wait()
	}
}

// response builds the answer from the decided plans: OVER_LIMIT if one was
// refused, unless ServiceConfig.ShadowMode lets every request through. It
// reports each decided descriptor to OnDescriptor and adds the headers.
func (s *Service) response(domain string, plans []plan, refused bool) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(plans))}
	if refused && !s.cfg.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	for i := range plans {
		p := &plans[i]
		if p.status == nil { // nothing limited it
			p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		}
		resp.Statuses[i] = p.status
		if s.cfg.OnDescriptor != nil && p.rule != nil {
			s.cfg.OnDescriptor(DescriptorEvent{
				Domain: domain, Key: p.metric, Hits: p.hits, Over: p.over,
				Shadow: p.over && (p.shadow || s.cfg.ShadowMode),
				Limit:  p.current.GetRequestsPerUnit(), Remaining: p.status.LimitRemaining,
			})
		}
	}
	if s.cfg.Headers != nil {
		resp.ResponseHeadersToAdd = s.headers(plans, refused)
	}
	return resp
}

// plan matches each descriptor to its rule, then settles each plan. Replaces
// are applied only once every descriptor is matched, as a rule may replace
// the rule of a descriptor before or after its own.
func (s *Service) plan(cfg *Config, req *rlspb.RateLimitRequest) ([]plan, error) {
	plans := make([]plan, len(req.Descriptors))
	var replaced map[string]bool
	_, known := cfg.domains[req.Domain]
	for i, d := range req.Descriptors {
		p := &plans[i]
		if err := s.planDescriptor(p, cfg, req, d, known); err != nil {
			return nil, err
		}
		if p.rule == nil {
			continue
		}
		for _, r := range p.rule.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[r] = true
		}
	}
	for i := range plans {
		if err := s.settle(&plans[i], replaced); err != nil {
			return nil, err
		}
	}
	return plans, nil
}

// planDescriptor fills p for descriptor d: its hits, and the rule and
// limit that decide it. A descriptor's own limit, in a configured domain,
// overrides its rule's in the same bucket; without a rule it gets a rule of
// its own. p.rule stays nil when nothing limits d.
func (s *Service) planDescriptor(p *plan, cfg *Config, req *rlspb.RateLimitRequest, d *rlpb.RateLimitDescriptor, known bool) error {
	entries := make([]entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		entries[j] = entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	r, subject := cfg.match(req.Domain, entries)
	p.hits = descriptorHits(req, d)
	p.check = p.hits == 0
	p.give = d.GetIsNegativeHits() && !p.check
	if o := d.GetLimit(); o != nil && known && len(entries) > 0 {
		if r == nil {
			r, subject = ownRule(req.Domain, entries)
		}
		if err := p.override(r, o); err != nil {
			return err
		}
	} else if r != nil {
		p.ruleLimit(r)
	}
	if r == nil {
		return nil
	}
	p.rule, p.subject = r, subject
	p.usage, p.shadow = r.Usage, r.ShadowMode
	p.metric = r.FullKey
	if r.DetailedMetric {
		p.metric = descriptorKey(req.Domain, entries)
	}
	return nil
}

// descriptorHits returns d's hits: its own hits_addend if set (0 is a
// check), else the request's, else 1 (a request's 0 is unset, so 1).
func descriptorHits(req *rlspb.RateLimitRequest, d *rlpb.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	if n := uint64(req.GetHitsAddend()); n != 0 {
		return n
	}
	return 1
}

// ownRule is the rule of a descriptor whose own limit matched no rule: its
// buckets are the shared limiter's (ownName), keyed by the domain, the
// entries' keys and their values, so each such descriptor has its own
// bucket; its statistics key is the domain's "descriptor_limit" (never the
// request's keys or values).
func ownRule(domain string, entries []entry) (*rule, string) {
	values := make([]string, len(entries)+1)
	values[0] = ownKey(domain, entries)
	for j, e := range entries {
		values[j+1] = e.Value
	}
	return &rule{Name: ownName, FullKey: domain + ".descriptor_limit"}, subjectOf(values)
}

// ruleLimit makes rule r's own limit decide p, as override does for a
// descriptor's limit.
func (p *plan) ruleLimit(r *rule) {
	p.current = r.current
	p.lim, _ = r.Limit()
	p.refuse = !r.Unlimited && r.RequestsPerUnit == 0
}

// settle applies to p what only the whole request tells, and readies it
// for deciding: a rule another descriptor's rule replaces decides nothing,
// an unlimited rule answers OK with the most remaining and takes nothing,
// and any other rule that does not always refuse gets its limiter: the
// Service's, under the rule's Name and p.lim.
func (s *Service) settle(p *plan, replaced map[string]bool) error {
	if p.rule != nil && p.rule.LimitName != "" && replaced[p.rule.LimitName] {
		*p = plan{}
	}
	if p.rule != nil && p.rule.Unlimited {
		p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		p.rule = nil
	}
	if p.rule == nil || p.refuse {
		return nil
	}
	v, err := s.limiter.Under(policyname.Of(p.rule.Name), p.lim)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "rate limit %s: %v", p.rule.FullKey, err)
	}
	p.l = v
	return nil
}

// override makes a descriptor's own limit decide p, in the bucket of the
// rule r it matched.
func (p *plan) override(r *rule, o *rlpb.RateLimitDescriptor_RateLimitOverride) error {
	u := unit(o.GetUnit())
	if u.Duration() == 0 {
		return status.Errorf(codes.InvalidArgument, "descriptor limit: unknown unit %v", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	p.current = &rlspb.RateLimitResponse_RateLimit{
		Name: r.LimitName, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: rlspb.RateLimitResponse_RateLimit_Unit(u),
	}
	if o.GetUnitMultiplier() != nil {
		p.current.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	if o.GetRequestsPerUnit() == 0 {
		p.refuse = true
		return nil
	}
	p.lim = unitLimit(o.GetRequestsPerUnit(), u, mult)
	if err := p.lim.Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "descriptor limit: %v", err)
	}
	return nil
}

func descriptorKey(domain string, entries []entry) string {
	k := domain
	for _, e := range entries {
		k += "." + e.Key
		if e.Value != "" {
			k += "_" + e.Value
		}
	}
	return k
}

// charges reports whether p charges usage: hits of a usage limit, neither
// a check nor given back.
func (p *plan) charges() bool { return p.usage && !p.check && !p.give }

// afterTheFact reports whether p is accounting after the fact, never refused:
// hits given back (is_negative_hits) or usage charged.
func (p *plan) afterTheFact() bool { return p.give || p.charges() }

// giveBack gives p's hits back (is_negative_hits): at most the burst, as a
// bucket never holds more.
func (s *Service) giveBack(ctx context.Context, p *plan) {
	res, err := p.l.Refund(ctx, p.subject, clampInt(p.hits))
	s.after(p, res, err)
}

// charge charges p's usage as debt (core's Charge: never refused; the
// bucket owes at most one burst, as the limiters have no MaxWait, and a
// charge beyond is forgiven).
func (s *Service) charge(ctx context.Context, p *plan) {
	res, err := p.l.Charge(ctx, p.subject, clampInt(p.hits))
	s.after(p, res, err)
}

// look reports the state of p's usage bucket in a refused request, which
// charges nothing.
func (s *Service) look(ctx context.Context, p *plan) {
	res, err := p.l.Peek(ctx, p.subject, 1)
	res.Allowed = true // a charge is never refused
	s.after(p, res, err)
}

// after sets the status of accounting after the fact: OK, with the
// bucket's numbers when the store gave them.
func (s *Service) after(p *plan, res core.Result, err error) {
	if err != nil || res.Degraded {
		p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: p.current}
		return
	}
	p.status = s.status(p, rlspb.RateLimitResponse_OK, res)
}

func (s *Service) status(p *plan, code rlspb.RateLimitResponse_Code, res core.Result) *rlspb.RateLimitResponse_DescriptorStatus {
	st := &rlspb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: p.current}
	if res.Remaining > 0 {
		st.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
	}
	if p.refuse {
		// Never passes: until the unit's end, as the reference says.
		d := unit(p.current.GetUnit()).Duration() * time.Duration(max(p.current.GetUnitMultiplier().GetValue(), 1))
		st.DurationUntilReset = durationpb.New(d)
		return st
	}
	if res.Limit.Rate == 0 {
		return st
	}
	d := res.ResetAfter
	if code == rlspb.RateLimitResponse_OVER_LIMIT {
		d = res.RetryAfter
	}
	st.DurationUntilReset = durationpb.New(d)
	return st
}

// headers are the response headers of the descriptor closest to its limit:
// in a refused request, the first refused one.
func (s *Service) headers(plans []plan, refused bool) []*corepb.HeaderValue {
	pick := -1
	if refused {
		pick = slices.IndexFunc(plans, func(p plan) bool { return p.over && !p.shadow })
	} else {
		for i := range plans {
			st := plans[i].status
			if st.CurrentLimit != nil && (pick < 0 || st.LimitRemaining < plans[pick].status.LimitRemaining) {
				pick = i
			}
		}
	}
	if pick < 0 || plans[pick].status.CurrentLimit == nil {
		return nil
	}
	st := plans[pick].status
	reset := int64(0)
	if d := st.DurationUntilReset; d != nil {
		reset = int64(math.Ceil(d.AsDuration().Seconds()))
	}
	h := s.cfg.Headers
	return []*corepb.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

func clampInt(n uint64) int {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

var _ rlspb.RateLimitServiceServer = (*Service)(nil)

// String describes the Service's store failure answer, for start-up logs.
func (s *Service) String() string {
	fm := "gRPC Unavailable (Envoy's failure_mode_deny decides)"
	if s.cfg.FailMode != 0 {
		fm = s.cfg.FailMode.String()
	}
	return fmt.Sprintf("envoy.Service{timeout: %v, on store failure: %s, shadow: %v}", s.cfg.Timeout, fm, s.cfg.ShadowMode)
}
