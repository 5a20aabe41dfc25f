package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// state is the config in force and the readiness it gives. Before the
// first config the service is not ready (/healthcheck 500, gRPC health
// NOT_SERVING) and answers ShouldRateLimit with Unavailable, unless
// FORCE_START_WITHOUT_INITIAL_CONFIG makes it ready at once, as the
// reference; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED also asks for a
// config with at least one domain.
type state struct {
	svc        *envoy.Service
	log        *slog.Logger
	report     reporters
	health     *health.Server
	force      bool
	needDomain bool

	mu       sync.Mutex
	cfg      *envoy.Config // nil before the first config
	refused  bool          // the last load was refused
	stopping bool
	ready    bool
}

// errNoConfig answers a decision asked before the first config.
var errNoConfig = status.Error(codes.Unavailable, "no rate limit configuration loaded yet")

// apply puts a loaded config in force.
func (s *state) apply(cfg *envoy.Config, source string) {
	s.svc.SetConfig(cfg)
	s.mu.Lock()
	first, fixed := s.cfg == nil, s.refused
	s.cfg, s.refused = cfg, false
	s.mu.Unlock()
	s.report.configLoaded(true)
	switch {
	case first:
		s.log.Warn("config loaded", "from", source, "domains", cfg.Domains())
	case fixed:
		s.log.Warn("config reloaded: the refused config is fixed", "from", source, "domains", cfg.Domains())
	default:
		s.log.Info("config reloaded", "from", source, "domains", cfg.Domains())
	}
	s.setHealth()
}

// refuse reports a load that failed; what is in force stays.
func (s *state) refuse(err error, source string) {
	s.mu.Lock()
	had := s.cfg != nil
	s.refused = true
	s.mu.Unlock()
	s.report.configLoaded(false)
	switch {
	case had:
		s.log.Error("config reload refused; the last good config keeps serving", "from", source, "err", err)
	case s.force:
		s.log.Error("config refused; no config loaded yet: decisions answer Unavailable until one loads (FORCE_START_WITHOUT_INITIAL_CONFIG keeps /healthcheck ready)", "from", source, "err", err)
	default:
		s.log.Error("config refused; no config loaded yet: not ready (/healthcheck 500, gRPC health NOT_SERVING) and decisions answer Unavailable until one loads", "from", source, "err", err)
	}
}

// unrefuse reports a source that reads without error again but brings no
// new config (a refused change undone, or one to read again).
func (s *state) unrefuse(source string) {
	s.log.Warn("config files read without error again", "from", source)
}

// current returns the config in force, nil before the first.
func (s *state) current() *envoy.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// stop makes the service not ready, for the shutdown.
func (s *state) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.setHealth()
	s.health.Shutdown()
}

func (s *state) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *state) setHealth() {
	s.mu.Lock()
	ready := !s.stopping && (s.cfg != nil || s.force)
	if s.needDomain && (s.cfg == nil || len(s.cfg.Domains()) == 0) {
		ready = false
	}
	s.ready = ready
	s.mu.Unlock()
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus("ratelimit", st)
}

// needConfig refuses decisions before the first config.
func (s *state) needConfig(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod == rlspb.RateLimitService_ShouldRateLimit_FullMethodName && s.current() == nil {
		return nil, errNoConfig
	}
	return h(ctx, req)
}

// watchFiles loads the config files now and every interval until ctx
// ends, in the caller's goroutine: a slow load never holds up serving or
// the shutdown.
func watchFiles(ctx context.Context, l *envoy.Loader, interval time.Duration, s *state) {
	lastErr := ""
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cfg, changed, err := l.Load()
		switch {
		case err != nil:
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				s.refuse(err, l.Dir)
			}
		case changed:
			lastErr = ""
			s.apply(cfg, l.Dir)
		case lastErr != "":
			lastErr = ""
			s.unrefuse(l.Dir)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
