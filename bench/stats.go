package bench

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// TripCounter is a go-redis hook counting round trips: one per command sent
// alone, one per pipeline or transaction, however many commands it holds.
type TripCounter struct{ n atomic.Int64 }

var _ redis.Hook = (*TripCounter)(nil)

// Load returns the round trips counted so far.
func (t *TripCounter) Load() int64 { return t.n.Load() }

// DialHook implements redis.Hook.
func (t *TripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (t *TripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (t *TripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmds)
	}
}

// ServerStats is what INFO says about the server's work so far: calls per
// command (commands run by scripts included, as Redis counts them) and the
// CPU seconds it used.
type ServerStats struct {
	Calls map[string]int64
	Usec  map[string]int64 // time spent in each command; a script's includes the commands it runs
	CPU   float64          // used_cpu_user + used_cpu_sys, seconds
}

// ReadServerStats asks the server for INFO commandstats and INFO cpu.
func ReadServerStats(ctx context.Context, c *redis.Client) (ServerStats, error) {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return ServerStats{}, err
	}
	st := ServerStats{Calls: map[string]int64{}, Usec: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			cmd := strings.TrimPrefix(name, "cmdstat_")
			for _, f := range strings.Split(val, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.Calls[cmd] = n
				case "usec":
					st.Usec[cmd] = n
				}
			}
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, _ := strconv.ParseFloat(val, 64)
			st.CPU += f
		}
	}
	return st, sc.Err()
}

// Sub returns the work done between before and s, leaving out the INFO
// calls that measured it.
func (s ServerStats) Sub(before ServerStats) ServerStats {
	d := ServerStats{Calls: map[string]int64{}, Usec: map[string]int64{}, CPU: s.CPU - before.CPU}
	for k, v := range s.Calls {
		if k == "info" {
			continue
		}
		if v -= before.Calls[k]; v > 0 {
			d.Calls[k] = v
			d.Usec[k] = s.Usec[k] - before.Usec[k]
		}
	}
	return d
}

// Total is the number of commands called.
func (s ServerStats) Total() int64 {
	var n int64
	for _, v := range s.Calls {
		n += v
	}
	return n
}

// FreeAddr returns a loopback address nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
