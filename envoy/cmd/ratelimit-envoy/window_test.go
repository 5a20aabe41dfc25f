package main

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// pingCounter is a client connection that counts the HTTP/2 PING frames
// the server sends (not its acknowledgements of the client's).
type pingCounter struct {
	net.Conn
	mu    sync.Mutex
	buf   []byte
	pings int
}

func (c *pingCounter) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, b[:n]...)
	for len(c.buf) >= 9 { // a frame: 3 bytes of length, type, flags, stream
		size := 9 + (int(c.buf[0])<<16 | int(c.buf[1])<<8 | int(c.buf[2]))
		if len(c.buf) < size {
			break
		}
		if c.buf[3] == 0x6 && c.buf[4]&0x1 == 0 {
			c.pings++
		}
		c.buf = c.buf[size:]
	}
	return n, err
}

// The server's flow-control windows are fixed: it sends no PING to
// estimate the bandwidth-delay product as requests come (one write per
// request and one for its acknowledgement, for calls this small).
func TestNoWindowPings(t *testing.T) {
	t.Parallel()
	p := start(t, runtimeDir(t, map[string]string{"edge.yaml": operatorYAML}), "BACKEND_TYPE=memory")
	var counter *pingCounter
	addr := p.conn.Target()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil {
				return nil, err
			}
			counter = &pingCounter{Conn: c}
			return counter, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	for i := range 50 {
		if _, err := client.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlpb.RateLimitDescriptor{desc("user", strconv.Itoa(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if counter.pings != 0 {
		t.Errorf("50 requests: the server sent %d PING frames, want 0", counter.pings)
	}
}
