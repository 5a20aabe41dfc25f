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
	"runtime/debug"
	"strconv"
	"strings"
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
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		// The heap is small and most of it lives for one request: at Go's
		// 100 %, it is collected several times a second under load, each
		// time shrinking the stacks the next requests grow again.
		debug.SetGCPercent(400)
	}
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
	if s.UseDogStatsd {
		log.Warn("USE_DOG_STATSD is not supported and is ignored; USE_STATSD sends the reference's statsd lines")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	store, closeStore, err := newStore(ctx, s, log)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	var report reporters
	var interceptors []grpc.UnaryServerInterceptor
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
		report = append(report, newRefMetrics(reg, s.NearLimitRatio))
		cfg.Observer = ours
	}
	switch {
	case s.DisableStats || !s.UseStatsd:
	case s.UsePrometheus && !s.StatsdSet:
		log.Info("USE_PROMETHEUS=true: statsd is off unless USE_STATSD=true is set too")
	default:
		sd := newStatsd(ctx, s, log)
		report = append(report, sd)
		interceptors = append(interceptors, sd.serverCalls)
		log.Info("statsd lines sent", "to", net.JoinHostPort(s.StatsdHost, strconv.Itoa(s.StatsdPort)), "protocol", s.StatsdProtocol, "every", s.StatsFlush.String())
	}
	if len(report) > 0 {
		cfg.OnDescriptor = report.descriptor
	}
	svc, err := envoy.NewService(cfg)
	if err != nil {
		return err
	}

	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: s.GRPCMaxConnAge, MaxConnectionAgeGrace: s.GRPCMaxConnGrace}),
		// gRPC's default flow-control windows, fixed: a window sized by
		// bandwidth-delay estimates sends a PING to time each burst of data
		// received, about one per request for calls this small.
		grpc.InitialWindowSize(64 << 10), grpc.InitialConnWindowSize(64 << 10),
		// Calls on goroutines that live on: a goroutine of its own per call
		// grows its stack anew each time (runtime.morestack).
		grpc.NumStreamWorkers(streamWorkers),
	}
	if s.GRPCUseTLS {
		c, err := serverTLS(s)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(c)))
	}
	st := &state{svc: svc, log: log, report: report, health: health.NewServer(), force: s.ForceStart, needDomain: s.HealthyWithConfig}
	st.setHealth()
	interceptors = append(interceptors, report.countErrors, st.needConfig)
	opts = append(opts, grpc.ChainUnaryInterceptor(interceptors...))
	gs := grpc.NewServer(opts...)
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	healthpb.RegisterHealthServer(gs, st.health)

	// The config loads in its own goroutine: a slow or hostile load never
	// holds up the listeners or the shutdown.
	if strings.EqualFold(s.ConfigType, "GRPC_XDS_SOTW") {
		x, err := newXDSSource(s, st, log)
		if err != nil {
			return err
		}
		go x.run(ctx)
	} else {
		loader := &envoy.Loader{Dir: s.configDir(), IgnoreDotFiles: s.RuntimeIgnoreDots, Options: envoy.ConfigOptions{MergeDomains: s.MergeDomains}}
		go watchFiles(ctx, loader, s.ReloadInterval, st)
	}

	glis, err := net.Listen("tcp", net.JoinHostPort(s.GRPCHost, strconv.Itoa(s.GRPCPort)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !st.isReady() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("OK"))
	})
	mux.HandleFunc("/json", jsonHandler(svc, st, log))
	hlis, err := net.Listen("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		glis.Close()
		return err
	}
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	servers := []*http.Server{hsrv, debugServer(s.DebugHost, s.DebugPort, st, log)}
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
	log.Warn("ratelimit-envoy serving", "grpc", glis.Addr().String(), "http", hlis.Addr().String(), "config", s.ConfigType, "service", svc.String())

	<-ctx.Done()
	st.stop()
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

// streamWorkers is the number of goroutines that serve calls one after
// the other; calls beyond get a goroutine each.
const streamWorkers = 64

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
// request it cannot read or an error, 503 before the first config.
func jsonHandler(svc *envoy.Service, st *state, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if st.current() == nil {
			http.Error(w, errNoConfig.Error(), http.StatusServiceUnavailable)
			return
		}
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
