package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	gostats "github.com/lyft/gostats"
	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/grpc"
)

// statsdStats are the reference's statsd counters (its src/stats), sent
// by the library it uses (lyft/gostats) every STATS_FLUSH_INTERVAL, so its
// statsd-exporter mapping works unchanged:
//
//	ratelimit.service.rate_limit.<key>.{total_hits,over_limit,near_limit,within_limit,shadow_mode}
//	ratelimit.service.config_load_success, ratelimit.service.config_load_error
//	ratelimit.service.call.should_rate_limit.{redis_error,service_error}
//	ratelimit_server.<method>.total_requests, ratelimit_server.<method>.response_time (ms)
//
// <key> is the rule's key, or with detailed_metric the request's values,
// as there; beyond maxStatKeys keys, new ones are counted under
// <domain>.other_keys so that no stream of values grows the counters
// without bound.
type statsdStats struct {
	nearRatio            float64
	rules                gostats.Scope
	server               gostats.Scope
	loadOK, loadErr      gostats.Counter
	redisErr, serviceErr gostats.Counter

	mu   sync.Mutex
	keys map[string]*keyStats

	callsMu sync.RWMutex
	calls   map[string]*callStats // by the gRPC method's full name
}

type keyStats struct{ total, over, near, within, shadow gostats.Counter }

type callStats struct {
	total gostats.Counter
	time  gostats.Timer
}

const maxStatKeys = 1 << 14

// newStatsd starts a statsd sink flushed every s.StatsFlush until ctx ends.
func newStatsd(ctx context.Context, s settings, log *slog.Logger) *statsdStats {
	sink := gostats.NewNetSink(gostats.WithStatsdHost(s.StatsdHost), gostats.WithStatsdPort(s.StatsdPort),
		gostats.WithStatsdProtocol(s.StatsdProtocol), gostats.WithLogger(&sinkLog{log: log}))
	store := gostats.NewStore(sink, false)
	go store.StartContext(ctx, time.NewTicker(s.StatsFlush))
	svc := store.ScopeWithTags("ratelimit", s.ExtraTags).Scope("service")
	calls := svc.Scope("call.should_rate_limit")
	return &statsdStats{
		nearRatio: s.NearLimitRatio,
		rules:     svc.Scope("rate_limit"),
		server:    store.ScopeWithTags("ratelimit_server", s.ExtraTags),
		loadOK:    svc.NewCounter("config_load_success"), loadErr: svc.NewCounter("config_load_error"),
		redisErr: calls.NewCounter("redis_error"), serviceErr: calls.NewCounter("service_error"),
		keys: make(map[string]*keyStats), calls: make(map[string]*callStats),
	}
}

func (m *statsdStats) key(domain, key string) *keyStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[key]
	if !ok {
		if len(m.keys) >= maxStatKeys {
			key = domain + ".other_keys"
			if k, ok = m.keys[key]; ok {
				return k
			}
		}
		name := sanitizeStat(key)
		k = &keyStats{
			total: m.rules.NewCounter(name + ".total_hits"), over: m.rules.NewCounter(name + ".over_limit"),
			near: m.rules.NewCounter(name + ".near_limit"), within: m.rules.NewCounter(name + ".within_limit"),
			shadow: m.rules.NewCounter(name + ".shadow_mode"),
		}
		m.keys[key] = k
	}
	return k
}

func (m *statsdStats) descriptor(e envoy.DescriptorEvent) {
	k := m.key(e.Domain, e.Key)
	c := countHits(e, m.nearRatio)
	k.total.Add(e.Hits)
	k.over.Add(c.over)
	k.near.Add(c.near)
	k.within.Add(c.within)
	k.shadow.Add(c.shadow)
}

func (m *statsdStats) configLoaded(ok bool) {
	if ok {
		m.loadOK.Inc()
	} else {
		m.loadErr.Inc()
	}
}

func (m *statsdStats) callError(kind string) {
	if kind == "redis_error" {
		m.redisErr.Inc()
	} else {
		m.serviceErr.Inc()
	}
}

// serverCalls counts every gRPC call and its time, as the reference's
// server reporter (its statsd-exporter mapping turns them into
// ratelimit_service_total_requests and ratelimit_service_response_time_seconds).
func (m *statsdStats) serverCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	c := m.call(info.FullMethod)
	c.total.Inc()
	resp, err := h(ctx, req)
	c.time.AddValue(float64(time.Since(start).Milliseconds()))
	return resp, err
}

// call returns the stats of a gRPC method, looked up once (the server's
// methods are few).
func (m *statsdStats) call(fullMethod string) *callStats {
	m.callsMu.RLock()
	c := m.calls[fullMethod]
	m.callsMu.RUnlock()
	if c != nil {
		return c
	}
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	c = &callStats{total: m.server.NewCounter(method + ".total_requests"), time: m.server.NewTimer(method + ".response_time")}
	m.callsMu.Lock()
	m.calls[fullMethod] = c
	m.callsMu.Unlock()
	return c
}

// hitCounts are one descriptor's hits as the reference counts them.
type hitCounts struct{ over, near, within, shadow uint64 }

func countHits(e envoy.DescriptorEvent, nearRatio float64) hitCounts {
	switch {
	case e.Shadow:
		return hitCounts{over: e.Hits, shadow: e.Hits}
	case e.Over:
		return hitCounts{over: e.Hits}
	}
	c := hitCounts{within: e.Hits}
	if used := e.Limit - min(e.Remaining, e.Limit); float64(used) > float64(e.Limit)*nearRatio {
		c.near = e.Hits
	}
	return c
}

var (
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4         = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
)

// sanitizeStat is the reference's utils.SanitizeStatName: ':' and '|'
// become '_', and so do the dots of an IPv4 address.
func sanitizeStat(s string) string {
	return ipv4.ReplaceAllStringFunc(statReplacer.Replace(s), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// sinkLog passes gostats' lines to the logger, each distinct line once in
// a row (an absent statsd would otherwise be logged every 3s).
type sinkLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last string
}

func (l *sinkLog) Errorf(msg string, args ...any) { l.say(slog.LevelError, msg, args) }
func (l *sinkLog) Warnf(msg string, args ...any)  { l.say(slog.LevelWarn, msg, args) }

func (l *sinkLog) say(level slog.Level, msg string, args []any) {
	line := fmt.Sprintf(msg, args...)
	l.mu.Lock()
	repeat := line == l.last
	l.last = line
	l.mu.Unlock()
	if !repeat {
		l.log.Log(context.Background(), level, "statsd: "+line)
	}
}
