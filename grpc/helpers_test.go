package grpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// server is a real gRPC server on a loopback TCP port serving the standard
// health service (Check and List unary, Watch a server stream), and a
// client connected to it.
type server struct {
	health *health.Server
	client healthpb.HealthClient
	addr   string
}

// serve starts a server with opts (the interceptors) and connects a client.
func serve(t *testing.T, opts ...grpc.ServerOption) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &server{health: hs, client: healthpb.NewHealthClient(conn), addr: lis.Addr().String()}
}

// serveBoth starts a server with both interceptors of lim and opts.
func serveBoth(t *testing.T, lim interceptors) *server {
	t.Helper()
	return serve(t, grpc.ChainUnaryInterceptor(lim.unary), grpc.ChainStreamInterceptor(lim.stream))
}

type interceptors struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// call is what a client saw of one unary call.
type call struct {
	md  metadata.MD
	st  *status.Status
	err error
}

func (c call) code() codes.Code { return c.st.Code() }

// retryDelay returns the RetryInfo detail's delay, and whether there was one.
func (c call) retryDelay() (time.Duration, bool) {
	for _, d := range c.st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// get returns the single value of the header metadata field k, "" for none.
func (c call) get(t *testing.T, k string) string {
	t.Helper()
	v := c.md.Get(k)
	switch len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	}
	t.Fatalf("metadata %s: %q, want one value", k, v)
	return ""
}

// check calls Health/Check with the outgoing metadata kv (pairs).
func (s *server) check(t *testing.T, kv ...string) call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var md metadata.MD
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	return call{md: md, st: status.Convert(err), err: err}
}

// list calls Health/List.
func (s *server) list(t *testing.T) call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var md metadata.MD
	_, err := s.client.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&md))
	return call{md: md, st: status.Convert(err), err: err}
}

// wantCodes makes n calls with f and checks their codes, in order.
func wantCodes(t *testing.T, f func() call, want ...codes.Code) []call {
	t.Helper()
	calls := make([]call, len(want))
	for i, w := range want {
		calls[i] = f()
		if got := calls[i].code(); got != w {
			t.Fatalf("call %d: %v (%v), want %v", i+1, got, calls[i].st.Message(), w)
		}
	}
	return calls
}
