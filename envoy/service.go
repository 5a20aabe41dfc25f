package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/core"
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
	Key    string // the rule's FullKey, or with detailed_metric the request's "domain.key_value…"
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
	// other replicas and apps, core.NewMemoryStore for one process. A
	// Store of another package cannot charge usage limits: such a charge
	// answers an Internal error.
	Store core.Store
	// Timeout bounds each store decision, through core's bound and
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
	// policy, the rule's Name).
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

	mu       sync.RWMutex
	limiters map[string]*core.Limiter // by policy name
}

// maxLimiters bounds the limiters a Service keeps, one per policy name
// (rules, and descriptors' own limits without a rule). Beyond it, a
// limiter is made for each decision.
const maxLimiters = 1 << 14

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
	s := &Service{cfg: cfg, limiters: make(map[string]*core.Limiter)}
	s.config.Store(&Config{domains: map[string]*node{}})
	return s, nil
}

// SetConfig makes c the config of the requests that start from now on.
// Buckets carry over: a rule whose limit changed keeps what was spent.
func (s *Service) SetConfig(c *Config) { s.config.Store(c) }

// limiter returns the limiter of policy name, made with lim if it is new;
// decisions pass their own limit (AllowLimit, PeekLimit, RefundLimit,
// With), so whichever limit made it does not matter.
func (s *Service) limiter(name string, lim core.Limit) (*core.Limiter, error) {
	s.mu.RLock()
	l := s.limiters[name]
	s.mu.RUnlock()
	if l != nil {
		return l, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.limiters[name]; l != nil {
		return l, nil
	}
	fm := s.cfg.FailMode
	if fm == 0 {
		fm = core.FailOpen // Degraded results become gRPC errors
	}
	l, err := core.New(core.Config{
		Store: s.cfg.Store, Limit: lim, Name: name, FailMode: fm, Instances: s.cfg.Instances,
		Timeout: s.cfg.Timeout, Observer: s.cfg.Observer, Logger: s.cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if len(s.limiters) < maxLimiters {
		s.limiters[name] = l
	}
	return l, nil
}

// limitCheck validates a descriptor's own limit: With refuses a limit
// that no limiter could decide, and keeps the few in use (bounded).
var limitCheck, _ = core.New(core.Config{Store: core.NewMemoryStore(), Limit: core.PerSecond(1), Name: "envoy-limit-check", FailMode: core.FailOpen})

// plan is one descriptor's part of a request.
type plan struct {
	rule    *rule // nil: no rule matched and no limit of its own
	name    string
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

	l      *core.Limiter
	taken  bool
	over   bool // the rule refused it (enforced or, in shadow mode, not)
	status *rlspb.RateLimitResponse_DescriptorStatus
}

var errStore = status.Error(codes.Unavailable, "rate limit store unavailable")

// ShouldRateLimit decides a request's descriptors all or nothing (see the
// package doc). Its error is InvalidArgument for a request without a domain
// or descriptors, and Unavailable when the store could not decide and
// ServiceConfig.FailMode is not set.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	plans, err := s.plan(s.config.Load(), req)
	if err != nil {
		return nil, err
	}
	refused, degraded, err := s.decideAll(ctx, plans)
	if err != nil {
		return nil, err
	}
	if refused >= 0 {
		s.undoRefused(ctx, plans, refused, degraded)
	}
	if err := s.account(ctx, plans, refused >= 0, degraded); err != nil {
		return nil, err
	}
	return s.response(req.Domain, plans, refused), nil
}

// decideAll decides the descriptors in order until one is refused, whose
// index it returns (-1: none). Accounting after the fact is left to
// account, as it is never refused. degraded says a decision found the store
// failing; the store is then not asked again for this request where the
// FailMode answers without it, so a stall costs an answer one Timeout, not
// one per descriptor. On an error what was taken is already given back.
func (s *Service) decideAll(ctx context.Context, plans []plan) (refused int, degraded bool, err error) {
	for i := range plans {
		p := &plans[i]
		if p.rule == nil || p.afterTheFact() {
			continue
		}
		if degraded && !p.refuse && s.cfg.FailMode == core.FailOpen {
			p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: p.current}
			continue
		}
		over, deg, err := s.decide(ctx, p)
		if err != nil {
			s.giveBack(ctx, plans, true)
			return -1, degraded, err
		}
		degraded = degraded || deg
		if over && !p.shadow {
			return i, degraded, nil
		}
	}
	return -1, degraded, nil
}

// undoRefused makes a refused request take nothing: it gives back what the
// descriptors before the refused one took, then reports the statuses of
// the descriptors after it, and of usage a refused request does not charge,
// by looking only, all at once: a slow node delays the answer once, not
// once each. Nothing is looked at while the store fails.
func (s *Service) undoRefused(ctx context.Context, plans []plan, refused int, degraded bool) {
	s.giveBack(ctx, plans, degraded)
	var wg sync.WaitGroup
	for i := 0; i < len(plans) && !degraded; i++ {
		if p := &plans[i]; p.charges() || (i > refused && !p.afterTheFact()) {
			wg.Go(func() { s.report(ctx, p) })
		}
	}
	wg.Wait()
}

// account applies the accounting after the fact, all at once: hits given
// back whatever the answer, usage only in an admitted request (a refused
// request charges nothing). It is skipped while the store fails (what it
// would have charged is lost, never refused).
func (s *Service) account(ctx context.Context, plans []plan, refused, degraded bool) error {
	if degraded {
		return nil
	}
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i := range plans {
		if p := &plans[i]; p.l != nil && (p.give || (p.charges() && !refused)) {
			wg.Go(func() {
				if err := s.after(ctx, p); err != nil {
					failed.Store(&err)
				}
			})
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// response builds the answer from the decided plans: OVER_LIMIT if one was
// refused, unless ServiceConfig.ShadowMode lets every request through. It
// reports each decided descriptor to OnDescriptor and adds the headers.
func (s *Service) response(domain string, plans []plan, refused int) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(plans))}
	if refused >= 0 && !s.cfg.ShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	for i := range plans {
		p := &plans[i]
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
	p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	entries := make([]entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		entries[j] = entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	rule, subject := cfg.match(req.Domain, entries)
	p.hits = descriptorHits(req, d)
	p.check = p.hits == 0
	p.give = d.GetIsNegativeHits() && !p.check
	if o := d.GetLimit(); o != nil && known && len(entries) > 0 {
		if rule == nil {
			rule, subject = ownRule(req.Domain, entries)
		}
		if err := s.override(p, rule, o); err != nil {
			return err
		}
	} else if rule != nil {
		p.ruleLimit(rule)
	}
	if rule == nil {
		return nil
	}
	p.rule, p.name, p.subject = rule, rule.Name, subject
	p.usage, p.shadow = rule.Usage, rule.ShadowMode
	p.metric = rule.FullKey
	if rule.DetailedMetric {
		p.metric = descriptorKey(req.Domain, entries)
	}
	return nil
}

// descriptorHits returns d's hits: its own hits_addend if set (0 is a
// check), else the request's, else 1.
func descriptorHits(req *rlspb.RateLimitRequest, d *rlpb.RateLimitDescriptor) uint64 {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	if n := uint64(req.GetHitsAddend()); n != 0 {
		return n
	}
	return 1
}

// ownRule is the rule of a descriptor whose own limit matched no rule:
// named after its entries, so each such descriptor has its own bucket,
// with all its values as the subject.
func ownRule(domain string, entries []entry) (*rule, string) {
	values := make([]string, len(entries))
	for j, e := range entries {
		values[j] = e.Value
	}
	return &rule{Name: overrideName(domain, entries), FullKey: descriptorKey(domain, entries)}, subjectOf(values)
}

// ruleLimit makes rule's own limit decide p, as override does for a
// descriptor's limit.
func (p *plan) ruleLimit(rule *rule) {
	p.current = &rlspb.RateLimitResponse_RateLimit{
		Name: rule.LimitName, RequestsPerUnit: rule.RequestsPerUnit,
		Unit: rlspb.RateLimitResponse_RateLimit_Unit(rule.Unit),
	}
	if rule.UnitMultiplier > 1 {
		p.current.UnitMultiplier = wrapperspb.UInt32(rule.UnitMultiplier)
	}
	p.lim, _ = rule.Limit()
	p.refuse = !rule.Unlimited && rule.RequestsPerUnit == 0
}

// settle applies to p what only the whole request tells, and readies it
// for deciding: a rule another descriptor's rule replaces decides nothing,
// an unlimited rule answers OK with the most remaining and takes nothing,
// and any other rule that does not always refuse gets its limiter.
func (s *Service) settle(p *plan, replaced map[string]bool) error {
	if p.rule != nil && p.rule.LimitName != "" && replaced[p.rule.LimitName] {
		*p = plan{status: p.status}
	}
	if p.rule != nil && p.rule.Unlimited {
		p.status.LimitRemaining = math.MaxUint32
		p.rule = nil
	}
	if p.rule != nil && !p.refuse {
		l, err := s.limiter(p.name, p.lim)
		if err != nil {
			return status.Errorf(codes.Internal, "rate limit %s: %v", p.name, err)
		}
		p.l = l
	}
	return nil
}

// override makes a descriptor's own limit decide it, in the bucket of the
// rule it matched.
func (s *Service) override(p *plan, rule *rule, o *rlpb.RateLimitDescriptor_RateLimitOverride) error {
	u := unit(o.GetUnit())
	if u.Duration() == 0 {
		return status.Errorf(codes.InvalidArgument, "descriptor limit: unknown unit %v", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	p.current = &rlspb.RateLimitResponse_RateLimit{
		Name: rule.LimitName, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: rlspb.RateLimitResponse_RateLimit_Unit(u),
	}
	if o.GetUnitMultiplier() != nil {
		p.current.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	if o.GetRequestsPerUnit() == 0 {
		p.refuse = true
		return nil
	}
	p.lim = unitLimit(o.GetRequestsPerUnit(), u, mult)
	if _, err := limitCheck.With(p.lim); err != nil {
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

// decide takes or checks a descriptor's hits and sets its status; over
// says it was refused, degraded that the FailMode decided. An error means
// the store could not decide and no FailMode was chosen.
func (s *Service) decide(ctx context.Context, p *plan) (over, degraded bool, err error) {
	defer func() {
		p.over = over
		if over && p.shadow {
			// Shadow mode: reported as the reference does, OK.
			p.status.Code = rlspb.RateLimitResponse_OK
		}
	}()
	if p.refuse {
		p.status = s.status(p, rlspb.RateLimitResponse_OVER_LIMIT, core.Result{})
		return true, false, nil
	}
	if p.shadow || s.cfg.ShadowMode {
		// Observers count a refusal that is let through as would_deny.
		ctx = core.WithDryRun(ctx)
	}
	var res core.Result
	if p.check {
		res, err = p.l.PeekLimit(ctx, p.subject, 1, p.lim)
	} else {
		if p.hits > uint64(p.lim.Capacity()) {
			// More than the bucket holds: never allowed, nothing asked.
			p.status = s.status(p, rlspb.RateLimitResponse_OVER_LIMIT, core.Result{})
			return true, false, nil
		}
		res, err = p.l.AllowLimit(ctx, p.subject, int(p.hits), p.lim)
		p.taken = err == nil && res.Allowed && !res.Degraded
	}
	if err != nil {
		return false, false, status.Errorf(codes.Internal, "rate limit %s: %v", p.name, err)
	}
	if res.Degraded && s.cfg.FailMode == 0 {
		return false, true, errStore
	}
	code := rlspb.RateLimitResponse_OK
	if !res.Allowed {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	p.status = s.status(p, code, res)
	return !res.Allowed, res.Degraded, nil
}

// charges reports whether p charges usage: hits of a usage limit, neither
// a check nor given back.
func (p *plan) charges() bool { return p.usage && !p.check && !p.give }

// afterTheFact reports whether p is accounting after the fact, never refused:
// hits given back (is_negative_hits) or usage charged.
func (p *plan) afterTheFact() bool { return p.give || p.charges() }

// after applies the accounting after the fact: hits given back are given
// back (capped at the burst), usage is charged as debt (core's Charge:
// never refused; the bucket owes at most one burst, as the limiters have
// no MaxWait, and a charge beyond is forgiven).
func (s *Service) after(ctx context.Context, p *plan) error {
	var res core.Result
	var err error
	if p.give {
		res, err = p.l.RefundLimit(ctx, p.subject, clampInt(p.hits), p.lim)
	} else {
		var l *core.Limiter
		if l, err = p.l.With(p.lim); err == nil {
			res, err = l.Charge(ctx, p.subject, clampInt(p.hits))
		}
	}
	if err != nil {
		return status.Errorf(codes.Internal, "rate limit %s: %v", p.name, err)
	}
	if res.Degraded {
		// The request was allowed and the others charged: answer so,
		// without numbers the store did not give.
		p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: p.current}
		return nil
	}
	p.status = s.status(p, rlspb.RateLimitResponse_OK, res)
	return nil
}

// report sets the status of a descriptor left undecided in a refused
// request: what it would answer, taking nothing (usage that is not
// charged: OK, with the bucket's state).
func (s *Service) report(ctx context.Context, p *plan) {
	if p.refuse {
		p.status = s.status(p, rlspb.RateLimitResponse_OVER_LIMIT, core.Result{})
		return
	}
	if p.l == nil {
		return
	}
	n := clampInt(max(p.hits, 1))
	if n > p.lim.Capacity() || p.give || p.charges() {
		n = 1
	}
	res, err := p.l.PeekLimit(ctx, p.subject, n, p.lim)
	if err != nil || res.Degraded {
		p.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, CurrentLimit: p.current}
		return
	}
	code := rlspb.RateLimitResponse_OK
	if !res.Allowed && !p.charges() { // a charge is never refused
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	p.status = s.status(p, code, res)
}

// giveBack returns, in reverse order, what the descriptors took. After a
// store failure it does not wait (each refund is bounded by Timeout on its
// own), so the answer is not delayed by a store that is already failing.
func (s *Service) giveBack(ctx context.Context, plans []plan, failed bool) {
	var taken []*plan
	for i := len(plans) - 1; i >= 0; i-- {
		if plans[i].taken {
			taken = append(taken, &plans[i])
		}
	}
	if len(taken) == 0 {
		return
	}
	refund := func(ctx context.Context) {
		for _, p := range taken {
			res, err := p.l.RefundLimit(ctx, p.subject, int(p.hits), p.lim)
			p.taken = false
			if !failed && err == nil && !res.Degraded {
				p.status = s.status(p, rlspb.RateLimitResponse_OK, res)
			}
		}
	}
	if failed {
		go refund(context.WithoutCancel(ctx))
		return
	}
	refund(ctx)
}

func (s *Service) status(p *plan, code rlspb.RateLimitResponse_Code, res core.Result) *rlspb.RateLimitResponse_DescriptorStatus {
	st := &rlspb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: p.current}
	if res.Remaining > 0 {
		st.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
	}
	if p.refuse || res.Limit.Rate == 0 {
		return st
	}
	d := res.ResetAfter
	if code == rlspb.RateLimitResponse_OVER_LIMIT {
		d = res.RetryAfter
	}
	st.DurationUntilReset = durationpb.New(d)
	return st
}

func (s *Service) headers(plans []plan, refused int) []*corepb.HeaderValue {
	pick := -1
	if refused >= 0 {
		pick = refused
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
