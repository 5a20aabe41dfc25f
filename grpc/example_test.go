package grpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/ratelimit/core"
	ratelimit "github.com/sluicehq/ratelimit/grpc"
)

// A server allowing each client address 2 calls a minute, and 1 a minute
// to List; the third call is refused, and the client reads why and when
// to retry.
func Example() {
	store := core.NewMemoryStore() // or core.NewRedisStore(rdb), shared by every instance
	lim, err := core.New(core.Config{Store: store, Limit: core.PerMinute(2), FailMode: core.FailOpen})
	if err != nil {
		log.Fatal(err)
	}
	list, err := core.New(core.Config{Store: store, Name: "list", Limit: core.PerMinute(1), FailMode: core.FailClosed})
	if err != nil {
		log.Fatal(err)
	}
	opts := []ratelimit.Option{
		ratelimit.WithMethods(map[string]*core.Limiter{"/grpc.health.v1.Health/List": list}),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(lim, opts...)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(lim, opts...)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Printf("%v remaining=%s", st.Code(), strings.Join(md.Get("ratelimit-remaining"), ","))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				d := ri.GetRetryDelay().AsDuration()
				fmt.Printf(" retry_delay=%v", (d + time.Second - 1).Truncate(time.Second)) // whole seconds, rounded up
			}
		}
		fmt.Println()
	}
	var md metadata.MD
	_, err = client.List(context.Background(), &healthpb.HealthListRequest{}, grpc.Header(&md))
	fmt.Println("List:", status.Code(err), "limit="+strings.Join(md.Get("ratelimit-limit"), ","))
	// Output:
	// OK remaining=1
	// OK remaining=0
	// ResourceExhausted remaining=0 retry_delay=30s
	// List: OK limit=1
}
