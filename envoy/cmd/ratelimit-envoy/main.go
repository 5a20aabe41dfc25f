// Command ratelimit-envoy serves Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) on this library's token
// buckets: a drop-in for envoyproxy/ratelimit, with its config files and
// environment variables (docs/envoy.md lists them). Run it on the
// in-process store:
//
//	BACKEND_TYPE=memory RUNTIME_ROOT=./runtime RUNTIME_SUBDIRECTORY=ratelimit ratelimit-envoy
//
// or on Redis:
//
//	REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:6379 RUNTIME_ROOT=./runtime RUNTIME_SUBDIRECTORY=ratelimit ratelimit-envoy
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/envoy"
	"github.com/sluicehq/ratelimit/metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	if err := run(os.LookupEnv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-envoy:", err)
		os.Exit(1)
	}
}

func run(lookup func(string) (string, bool), logOut io.Writer) error {
	s, err := loadSettings(lookup)
	if err != nil {
		return err
	}
	log, err := newLogger(s, logOut)
	if err != nil {
		return err
	}
	if set := unsupportedSet(lookup); len(set) > 0 {
		log.Warn("these envoyproxy/ratelimit variables are not supported and are ignored: " + strings.Join(set, ", "))
	}
	if s.UseStatsd || s.UseDogStatsd {
		log.Warn("statsd is not supported: USE_STATSD (true by default, as in the reference) and USE_DOG_STATSD are ignored; " +
			"set USE_PROMETHEUS=true for the reference's series (ratelimit_service_rate_limit_*) and ours (ratelimit_decisions_total, …), " +
			"or USE_STATSD=false to silence this line")
	}
	if !strings.EqualFold(s.ConfigType, "FILE") {
		return fmt.Errorf("CONFIG_TYPE=%s is not supported: only FILE (configuration over xDS, as Envoy Gateway sends it, is not yet)", s.ConfigType)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	store, closeStore, err := newStore(ctx, s, log)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	var ref *refMetrics
	cfg := envoy.ServiceConfig{
		Store: store, Timeout: s.DecisionTimeout, ShadowMode: s.ShadowMode, Instances: s.Instances, Logger: log,
	}
	switch s.FailMode {
	case "open":
		cfg.FailMode = core.FailOpen
	case "closed":
		cfg.FailMode = core.FailClosed
	case "local":
		cfg.FailMode = core.FailLocal
	}
	if s.Headers {
		cfg.Headers = &envoy.Headers{Limit: s.HeaderLimit, Remaining: s.HeaderRemain, Reset: s.HeaderReset}
	}
	if s.UsePrometheus {
		ours := metrics.New()
		reg.MustRegister(ours, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		ref = newRefMetrics(reg, s.NearLimitRatio)
		cfg.Observer = ours
		cfg.OnDescriptor = ref.descriptor
	}
	svc, err := envoy.NewService(cfg)
	if err != nil {
		return err
	}

	loader := &envoy.Loader{Dir: s.configDir(), IgnoreDotFiles: s.RuntimeIgnoreDots, Options: envoy.ConfigOptions{MergeDomains: s.MergeDomains}}
	if c, _, err := loader.Load(); err != nil {
		log.Error("config not loaded; serving with no rules (every descriptor OK) until a good one loads", "dir", loader.Dir, "err", err)
		ref.configLoaded(false)
	} else {
		svc.SetConfig(c)
		log.Info("config loaded", "dir", loader.Dir, "domains", c.Domains())
		ref.configLoaded(true)
	}
	go loader.Watch(ctx, s.ReloadInterval, log, func(c *envoy.Config) { svc.SetConfig(c); ref.configLoaded(true) },
		func(error) { ref.configLoaded(false) })

	gs := grpc.NewServer(
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.GRPCMaxConnAge, MaxConnectionAgeGrace: s.GRPCMaxConnGrace}),
		grpc.UnaryInterceptor(ref.countErrors),
	)
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	var healthy atomic.Bool
	healthy.Store(true)

	glis, err := net.Listen("tcp", net.JoinHostPort(s.GRPCHost, strconv.Itoa(s.GRPCPort)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
	mux.HandleFunc("/json", jsonHandler(svc, log))
	hlis, err := net.Listen("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		glis.Close()
		return err
	}
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	servers := []*http.Server{hsrv}
	go hsrv.Serve(hlis)
	if s.UsePrometheus {
		msrv := &http.Server{Addr: s.PrometheusAddr, Handler: promMux(s.PrometheusPath, reg), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, msrv)
		go func() {
			if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener failed", "addr", s.PrometheusAddr, "err", err)
			}
		}()
	}
	go gs.Serve(glis)
	log.Warn("ratelimit-envoy serving", "grpc", glis.Addr().String(), "http", hlis.Addr().String(), "service", svc.String())

	<-ctx.Done()
	healthy.Store(false)
	hs.Shutdown()
	log.Warn("shutting down")
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	for _, srv := range servers {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	return nil
}

func promMux(path string, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// newStore builds the store BACKEND_TYPE names.
func newStore(ctx context.Context, s settings, log *slog.Logger) (core.Store, func(), error) {
	switch strings.ToLower(s.BackendType) {
	case "memory":
		log.Warn("BACKEND_TYPE=memory: limits are kept in this process only; replicas do not share them")
		return core.NewMemoryStore(), func() {}, nil
	case "redis", "":
		client, desc, err := redisClient(s)
		if err != nil {
			return nil, nil, err
		}
		prefix := s.CacheKeyPrefix
		if prefix == "" {
			prefix = core.DefaultPrefix
		}
		store := core.NewRedisStore(client, core.WithPrefix(prefix))
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := store.Preload(pctx); err != nil {
			log.Error("Redis does not answer yet; decisions fail until it does (see SLUICE_FAIL_MODE)", "redis", desc, "err", err)
		} else {
			log.Info("Redis answers", "redis", desc, "prefix", prefix)
		}
		return store, func() { client.Close() }, nil
	}
	return nil, nil, fmt.Errorf("BACKEND_TYPE=%s is not supported: want redis or memory", s.BackendType)
}

func newLogger(s settings, out io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToUpper(s.LogLevel) {
	case "TRACE", "DEBUG":
		level = slog.LevelDebug
	case "INFO":
		level = slog.LevelInfo
	case "WARN", "WARNING":
		level = slog.LevelWarn
	case "ERROR", "FATAL", "PANIC":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("LOG_LEVEL=%q: want DEBUG, INFO, WARN or ERROR", s.LogLevel)
	}
	o := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(s.LogFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(out, o)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(out, o)), nil
	}
	return nil, fmt.Errorf("LOG_FORMAT=%q: want text or json", s.LogFormat)
}

// jsonHandler serves the reference's /json: a RateLimitRequest in protobuf
// JSON, answered with the RateLimitResponse; 429 when OVER_LIMIT, 400 for a
// request it cannot read or an error.
func jsonHandler(svc *envoy.Service, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		var req rlspb.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		var resp *rlspb.RateLimitResponse
		if err == nil {
			resp, err = svc.ShouldRateLimit(r.Context(), &req)
		}
		if err != nil {
			log.Debug("/json", "err", err)
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	}
}

// countErrors counts ShouldRateLimit errors as the reference's
// should_rate_limit_error: redis_error for a store that could not decide,
// service_error otherwise. A nil *refMetrics counts nothing.
func (m *refMetrics) countErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil && m != nil {
		kind := "service_error"
		if status.Code(err) == codes.Unavailable {
			kind = "redis_error"
		}
		m.errors.WithLabelValues(kind).Inc()
	}
	return resp, err
}

func (m *refMetrics) configLoaded(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.configLoadSuccess.Inc()
	} else {
		m.configLoadError.Inc()
	}
}
