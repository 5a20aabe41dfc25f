package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// settings are the environment variables the binary reads: the reference's
// (envoyproxy/ratelimit's src/settings/settings.go) with its defaults, and
// ours, prefixed SLUICE_. docs/envoy.md lists them beside the reference's.
type settings struct {
	Host, GRPCHost    string
	Port, GRPCPort    int
	GRPCMaxConnAge    time.Duration
	GRPCMaxConnGrace  time.Duration
	LogLevel          string
	LogFormat         string
	ConfigType        string
	RuntimeRoot       string
	RuntimeSubdir     string
	RuntimeAppDir     string
	RuntimeIgnoreDots bool
	MergeDomains      bool

	BackendType    string
	RedisSocket    string
	RedisType      string
	RedisURL       string
	RedisPoolSize  int
	RedisAuth      string
	RedisSentAuth  string
	RedisTLS       bool
	RedisTLSCert   string
	RedisTLSKey    string
	RedisTLSCA     string
	RedisTLSNoHost bool
	RedisTimeout   time.Duration
	CacheKeyPrefix string

	ShadowMode     bool
	Headers        bool
	HeaderLimit    string
	HeaderRemain   string
	HeaderReset    string
	NearLimitRatio float64

	UsePrometheus  bool
	PrometheusAddr string
	PrometheusPath string
	UseStatsd      bool
	StatsdSet      bool // USE_STATSD was set (else USE_PROMETHEUS=true turns statsd off)
	UseDogStatsd   bool
	StatsdHost     string
	StatsdPort     int
	StatsdProtocol string
	ExtraTags      map[string]string
	StatsFlush     time.Duration
	DisableStats   bool

	DebugHost string
	DebugPort int

	ForceStart        bool
	HealthyWithConfig bool

	GRPCUseTLS    bool
	GRPCTLSCert   string
	GRPCTLSKey    string
	GRPCClientCA  string
	GRPCClientSAN string

	XDSServerURL      string
	XDSNodeID         string
	XDSNodeMetadata   string
	XDSHeaders        map[string]string
	XDSUseTLS         bool
	XDSClientCert     string
	XDSClientKey      string
	XDSServerCA       string
	XDSServerSAN      string
	XDSBackoffInitial time.Duration
	XDSBackoffMax     time.Duration
	XDSBackoffFactor  float64
	XDSBackoffJitter  bool
	XDSMaxMsgSize     int

	// Ours.
	DecisionTimeout time.Duration
	FailMode        string
	Instances       int
	ReloadInterval  time.Duration
}

// unsupported are reference variables this binary does not implement:
// each one set is named in one log line at start. Variables not listed
// here nor read by loadSettings are not the reference's.
var unsupported = []string{
	"GRPC_UDS", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"USE_DOG_STATSD_MOGRIFIERS",
	"PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
	"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA",
	"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
	"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// env reads variables, collecting the first malformed one.
type env struct {
	lookup func(string) (string, bool)
	err    error
}

func (e *env) str(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

func (e *env) integer(name string, def int) int {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("%s=%q: not an integer", name, v)
	}
	return n
}

func (e *env) boolean(name string, def bool) bool {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("%s=%q: not a boolean", name, v)
	}
	return b
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("%s=%q: not a duration (such as 50ms)", name, v)
	}
	return d
}

// tags reads the reference's map format, "k1:v1,k2:v2".
func (e *env) tags(name string) map[string]string {
	v, _ := e.lookup(name)
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, ":")
		if !ok && e.err == nil {
			e.err = fmt.Errorf("%s=%q: want key:value,key:value", name, v)
		}
		m[k] = val
	}
	return m
}

func (e *env) float(name string, def float64) float64 {
	v, ok := e.lookup(name)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("%s=%q: not a number", name, v)
	}
	return f
}

func loadSettings(lookup func(string) (string, bool)) (settings, error) {
	e := &env{lookup: lookup}
	s := settings{
		Host:              e.str("HOST", "0.0.0.0"),
		Port:              e.integer("PORT", 8080),
		GRPCHost:          e.str("GRPC_HOST", "0.0.0.0"),
		GRPCPort:          e.integer("GRPC_PORT", 8081),
		GRPCMaxConnAge:    e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GRPCMaxConnGrace:  e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		LogLevel:          e.str("LOG_LEVEL", "WARN"),
		LogFormat:         e.str("LOG_FORMAT", "text"),
		ConfigType:        e.str("CONFIG_TYPE", "FILE"),
		RuntimeRoot:       e.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdir:     e.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDir:     e.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDots: e.boolean("RUNTIME_IGNOREDOTFILES", false),
		MergeDomains:      e.boolean("MERGE_DOMAIN_CONFIG", false),

		BackendType:    e.str("BACKEND_TYPE", "redis"),
		RedisSocket:    e.str("REDIS_SOCKET_TYPE", "unix"),
		RedisType:      e.str("REDIS_TYPE", "SINGLE"),
		RedisURL:       e.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
		RedisPoolSize:  e.integer("REDIS_POOL_SIZE", 10),
		RedisAuth:      e.str("REDIS_AUTH", ""),
		RedisSentAuth:  e.str("REDIS_SENTINEL_AUTH", ""),
		RedisTLS:       e.boolean("REDIS_TLS", false),
		RedisTLSCert:   e.str("REDIS_TLS_CLIENT_CERT", ""),
		RedisTLSKey:    e.str("REDIS_TLS_CLIENT_KEY", ""),
		RedisTLSCA:     e.str("REDIS_TLS_CACERT", ""),
		RedisTLSNoHost: e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
		RedisTimeout:   e.duration("REDIS_TIMEOUT", 10*time.Second),
		CacheKeyPrefix: e.str("CACHE_KEY_PREFIX", ""),

		ShadowMode:     e.boolean("SHADOW_MODE", false),
		Headers:        e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		HeaderLimit:    e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		HeaderRemain:   e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		HeaderReset:    e.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),
		NearLimitRatio: e.float("NEAR_LIMIT_RATIO", 0.8),

		UsePrometheus:  e.boolean("USE_PROMETHEUS", false),
		PrometheusAddr: e.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath: e.str("PROMETHEUS_PATH", "/metrics"),
		UseStatsd:      e.boolean("USE_STATSD", true),
		UseDogStatsd:   e.boolean("USE_DOG_STATSD", false),
		StatsdHost:     e.str("STATSD_HOST", "localhost"),
		StatsdPort:     e.integer("STATSD_PORT", 8125),
		StatsdProtocol: e.str("STATSD_PROTOCOL", "tcp"),
		ExtraTags:      e.tags("EXTRA_TAGS"),
		StatsFlush:     e.duration("STATS_FLUSH_INTERVAL", 10*time.Second),
		DisableStats:   e.boolean("DISABLE_STATS", false),

		DebugHost: e.str("DEBUG_HOST", "0.0.0.0"),
		DebugPort: e.integer("DEBUG_PORT", 6070),

		ForceStart:        e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		HealthyWithConfig: e.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),

		GRPCUseTLS:    e.boolean("GRPC_SERVER_USE_TLS", false),
		GRPCTLSCert:   e.str("GRPC_SERVER_TLS_CERT", ""),
		GRPCTLSKey:    e.str("GRPC_SERVER_TLS_KEY", ""),
		GRPCClientCA:  e.str("GRPC_CLIENT_TLS_CACERT", ""),
		GRPCClientSAN: e.str("GRPC_CLIENT_TLS_SAN", ""),

		XDSServerURL:      e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		XDSNodeID:         e.str("CONFIG_GRPC_XDS_NODE_ID", "default"),
		XDSNodeMetadata:   e.str("CONFIG_GRPC_XDS_NODE_METADATA", ""),
		XDSHeaders:        e.tags("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"),
		XDSUseTLS:         e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
		XDSClientCert:     e.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
		XDSClientKey:      e.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
		XDSServerCA:       e.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
		XDSServerSAN:      e.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
		XDSBackoffInitial: e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second),
		XDSBackoffMax:     e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second),
		XDSBackoffFactor:  e.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5),
		XDSBackoffJitter:  e.boolean("XDS_CLIENT_BACKOFF_JITTER", true),
		XDSMaxMsgSize:     e.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0),

		DecisionTimeout: e.duration("SLUICE_DECISION_TIMEOUT", 50*time.Millisecond),
		FailMode:        strings.ToLower(e.str("SLUICE_FAIL_MODE", "error")),
		Instances:       e.integer("SLUICE_INSTANCES", 0),
		ReloadInterval:  e.duration("SLUICE_RELOAD_INTERVAL", time.Second),
	}
	_, s.StatsdSet = lookup("USE_STATSD")
	// gostats reads these itself, and panics on a malformed one.
	e.integer("GOSTATS_FLUSH_INTERVAL_SECONDS", 0)
	e.boolean("GOSTATS_LOGGING_SINK_DISABLED", false)
	if e.err != nil {
		return s, e.err
	}
	switch strings.ToUpper(s.ConfigType) {
	case "FILE", "GRPC_XDS_SOTW":
	default:
		return s, fmt.Errorf("CONFIG_TYPE=%s: want FILE or GRPC_XDS_SOTW", s.ConfigType)
	}
	if s.StatsFlush <= 0 || s.XDSBackoffInitial <= 0 || s.XDSBackoffMax < s.XDSBackoffInitial {
		return s, fmt.Errorf("STATS_FLUSH_INTERVAL and XDS_CLIENT_BACKOFF_INITIAL_INTERVAL must be positive, XDS_CLIENT_BACKOFF_MAX_INTERVAL at least the initial")
	}
	switch s.FailMode {
	case "error", "open", "closed":
	case "local":
		if s.Instances < 1 {
			return s, fmt.Errorf("SLUICE_FAIL_MODE=local needs SLUICE_INSTANCES (the replicas sharing the limits)")
		}
	default:
		return s, fmt.Errorf("SLUICE_FAIL_MODE=%q: want error, open, closed or local", s.FailMode)
	}
	if s.DecisionTimeout <= 0 {
		return s, fmt.Errorf("SLUICE_DECISION_TIMEOUT must be positive")
	}
	if s.ReloadInterval <= 0 {
		return s, fmt.Errorf("SLUICE_RELOAD_INTERVAL must be positive")
	}
	return s, nil
}

// configDir is where the config files are: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func (s settings) configDir() string {
	return filepath.Join(s.RuntimeRoot, s.RuntimeSubdir, s.RuntimeAppDir)
}

// unsupportedSet returns the reference's variables set in the environment
// that this binary ignores, sorted.
func unsupportedSet(lookup func(string) (string, bool)) []string {
	var set []string
	for _, name := range unsupported {
		if _, ok := lookup(name); ok {
			set = append(set, name)
		}
	}
	sort.Strings(set)
	return set
}
