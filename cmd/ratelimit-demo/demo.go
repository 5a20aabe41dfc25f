package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
	"github.com/sluicehq/ratelimit/nethttp"
)

// options are the demo's flags.
type options struct {
	redisAddr    string // -redis: a real Redis, which must answer
	envRedisAddr string // $REDIS_ADDR: a real Redis if it answers, else embedded
	serve        bool
	addr         string
	instances    int
	limit        int
	rate         int
	duration     time.Duration
	tty          bool
	timeout      time.Duration // core.Config.Timeout; 0 for its default (tests under -race raise it)
}

func (o options) validate() error {
	switch {
	case o.instances < 1 || o.instances > 9:
		return errors.New("-instances must be 1 to 9")
	case o.limit < 1:
		return errors.New("-limit must be at least 1")
	case o.rate < 1 || o.rate > 1000:
		return errors.New("-rate must be 1 to 1000")
	case o.duration < 0 || o.duration > time.Minute:
		return errors.New("-duration must be 0 to 1m")
	case o.duration == 0 && !o.serve:
		return errors.New("-duration 0 needs -serve")
	}
	return nil
}

// apiKeyHeader names the client. Every instance keys its buckets by it.
//
// Behind a balancer, keyfuncs.IP() would key every request by the
// balancer's address (RemoteAddr): one bucket for all clients. Keying by
// client address there takes keyfuncs.IP(keyfuncs.TrustedProxies(cidr)),
// with cidr the balancer's network, which clients must not share. On
// loopback the client and the balancer share 127.0.0.1, so the demo keys by
// API key, as an API would.
const apiKeyHeader = "X-API-Key"

// clientKey is the API key the demo's client sends.
const clientKey = "demo-client"

// clientKey returns the rate-limit key of the demo's client.
func (d *demo) clientKey() string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Set(apiKeyHeader, clientKey)
	k, _ := d.key(r)
	return k
}

// demo is a running setup: Redis, instances, balancer.
type demo struct {
	o         options
	redisDesc string
	mini      *miniredis.Miniredis // nil with a real Redis
	prefix    string               // this run's Redis key prefix
	clients   []*redis.Client
	store     *core.RedisStore // the first instance's, for Key
	instances []*instance
	servers   []*http.Server
	balancer  string // base URL
	key       keyfuncs.KeyFunc
	tally     atomic.Pointer[tally] // set while the client sends
	obs       counter
}

// run starts the setup, drives the burst through it, prints the results to
// out, and with o.serve keeps serving until ctx is done.
func run(ctx context.Context, o options, out io.Writer) (*report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	d := &demo{o: o, key: keyfuncs.Header(apiKeyHeader)}
	defer d.close()
	redisAddr, err := d.startRedis(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.startInstances(redisAddr); err != nil {
		return nil, err
	}
	if err := d.startBalancer(); err != nil {
		return nil, err
	}
	d.intro(out)

	var rep *report
	if o.duration > 0 {
		if rep, err = d.burst(ctx, out); err != nil {
			return nil, err
		}
		rep.print(out)
		if err := d.showRefusal(ctx, out); err != nil {
			return rep, err
		}
	}
	if !o.serve {
		fmt.Fprintln(out, "Done. Run it with -serve to keep the instances up and try them with curl.")
		return rep, nil
	}
	d.printCurl(out)
	<-ctx.Done()
	fmt.Fprintln(out, "\nStopped.")
	return rep, nil
}

// startRedis picks the Redis: -redis, else $REDIS_ADDR if it answers, else
// an embedded miniredis.
func (d *demo) startRedis(ctx context.Context) (string, error) {
	d.prefix = "ratelimit-demo:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	if d.o.redisAddr != "" {
		if err := ping(ctx, d.o.redisAddr); err != nil {
			return "", fmt.Errorf("redis at %s (-redis): %w", d.o.redisAddr, err)
		}
		d.redisDesc = "Redis at " + d.o.redisAddr + " (-redis)"
		return d.o.redisAddr, nil
	}
	if a := d.o.envRedisAddr; a != "" {
		if err := ping(ctx, a); err == nil {
			d.redisDesc = "Redis at " + a + " (REDIS_ADDR)"
			return a, nil
		}
		d.redisDesc = "embedded Redis (miniredis), as nothing answers at REDIS_ADDR=" + a
	} else {
		d.redisDesc = "embedded Redis (miniredis)"
	}
	m := miniredis.NewMiniRedis()
	// miniredis's TIME, which the script reads, is the real clock; its TTLs
	// run only with ClockTTL (or FastForward). With it, idle buckets expire
	// as on a real Redis.
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", fmt.Errorf("embedded redis: %w", err)
	}
	d.mini = m
	return m.Addr(), nil
}

func ping(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// startInstances starts the app instances, each with its own Redis client
// and limiters, as separate processes would have.
func (d *demo) startInstances(redisAddr string) error {
	limit := core.PerSecond(d.o.limit)
	for i := range d.o.instances {
		// MinIdleConns: connections dialled ahead of the first burst.
		client := redis.NewClient(&redis.Options{Addr: redisAddr, MinIdleConns: 8, ContextTimeoutEnabled: true})
		d.clients = append(d.clients, client)
		store := core.NewRedisStore(client, core.WithPrefix(d.prefix))
		if d.store == nil {
			d.store = store
		}
		shared, err := core.New(core.Config{
			Store:    store,
			Limit:    limit,
			Name:     "demo",
			FailMode: core.FailOpen, // a limiter outage must not become an API outage
			Timeout:  d.o.timeout,
			Observer: &d.obs,
		})
		if err != nil {
			return err
		}
		// Dial and load the script before the first request, as a readiness
		// check would: a cold first decision can take longer than Timeout.
		if _, err := shared.Allow(context.Background(), "warm-up"); err != nil {
			return err
		}
		local, err := core.New(core.Config{Store: core.NewMemoryStore(), Limit: limit, Name: "demo", FailMode: core.FailOpen})
		if err != nil {
			return err
		}
		in := &instance{
			demo:  d,
			index: i,
			name:  "instance-" + strconv.Itoa(i+1),
			local: local,
		}
		in.limited = nethttp.Middleware(shared, nethttp.WithKey(d.key))(http.HandlerFunc(in.hello))
		url, srv, err := serve("127.0.0.1:0", in)
		if err != nil {
			return err
		}
		in.url = url
		d.instances = append(d.instances, in)
		d.servers = append(d.servers, srv)
	}
	return nil
}

// startBalancer starts the round-robin reverse proxy in front of the
// instances. It appends the client's address to X-Forwarded-For, as real
// load balancers do.
func (d *demo) startBalancer() error {
	targets := make([]*url.URL, len(d.instances))
	for i, in := range d.instances {
		u, err := url.Parse(in.url)
		if err != nil {
			return err
		}
		targets[i] = u
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
			pr.SetXForwarded()
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
	}
	url, srv, err := serve(d.o.addr, proxy)
	if err != nil {
		return fmt.Errorf("balancer: %w", err)
	}
	d.balancer = url
	d.servers = append(d.servers, srv)
	return nil
}

// serve serves h on addr and returns its base URL.
func serve(addr string, h http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at close
	return "http://" + ln.Addr().String(), srv, nil
}

func (d *demo) close() {
	for _, s := range d.servers {
		s.Close()
	}
	for _, c := range d.clients {
		c.Close()
	}
	if d.mini != nil {
		d.mini.Close()
	}
}

func (d *demo) intro(out io.Writer) {
	fmt.Fprintf(out, "ratelimit demo: %d app instances behind one load balancer, one limit shared through Redis\n\n", d.o.instances)
	fmt.Fprintf(out, "  redis      %s\n", d.redisDesc)
	for _, in := range d.instances {
		fmt.Fprintf(out, "  %s %s   net/http + ratelimit/nethttp, its own *core.Limiter and Redis client\n", in.name, in.url)
	}
	fmt.Fprintf(out, "  balancer   %s   round robin over the instances (reverse proxy)\n", d.balancer)
	fmt.Fprintf(out, "  limit      %d requests/s per client (burst %d), keyed by the %s header, FailOpen\n", d.o.limit, d.o.limit, apiKeyHeader)
	fmt.Fprintf(out, "  bucket     %s's, in Redis at key %s\n\n", clientKey, d.store.Key("demo", d.clientKey()))
}

func (d *demo) printCurl(out io.Writer) {
	b, n, h := d.balancer, d.o.limit+5, apiKeyHeader
	fmt.Fprintf(out, "Serving until Ctrl-C. Try, through the balancer:\n\n")
	fmt.Fprintf(out, "  curl -i -H '%s: alice' %s/\n", h, b)
	fmt.Fprintf(out, "  curl -s -o /dev/null -w '%%{http_code} ' -H '%s: alice' '%s/?[1-%d]'; echo   # %d requests at once: the last ones get 429\n", h, b, n, n)
	fmt.Fprintf(out, "  curl -s -o /dev/null -w '%%{http_code} ' -H '%s: bob' '%s/?[1-%d]'; echo     # bob has a bucket of his own\n", h, b, n)
	fmt.Fprintf(out, "  curl -i %s/   # no API key: 400\n", b)
	fmt.Fprintf(out, "\nor an instance directly, sharing alice's bucket with the others:\n\n")
	fmt.Fprintf(out, "  curl -i -H '%s: alice' %s/\n\n", h, d.instances[0].url)
}

// counter is the shared limiters' core.Observer: it counts store calls,
// cached denials and degraded decisions.
type counter struct {
	storeCalls, cached, degraded atomic.Int64
}

// reset zeroes the counts, after the warm-up.
func (c *counter) reset() {
	c.storeCalls.Store(0)
	c.cached.Store(0)
	c.degraded.Store(0)
}

func (c *counter) Decision(e core.DecisionEvent) {
	switch {
	case e.Cached:
		c.cached.Add(1)
	case e.Degraded:
		c.degraded.Add(1)
	default:
		c.storeCalls.Add(1)
	}
}

func (c *counter) BreakerChange(string, bool) {}
