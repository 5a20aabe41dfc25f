package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sluicehq/ratelimit/envoy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// rateLimitConfigType is the xDS resource of the reference's config
// (CONFIG_TYPE=GRPC_XDS_SOTW), as Envoy Gateway serves it.
const rateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// xdsSource subscribes to the config over xDS (state of the world, on
// the aggregated stream, as the reference): each response is the whole
// config, applied all or nothing like a file reload (a bad one is NACKed,
// says why, and the last good config keeps serving). A stream that ends
// is opened again after a backoff.
type xdsSource struct {
	s     settings
	st    *state
	log   *slog.Logger
	dial  []grpc.DialOption
	node  *corev3.Node
	label string
}

func newXDSSource(s settings, st *state, log *slog.Logger) (*xdsSource, error) {
	creds := insecure.NewCredentials()
	if s.XDSUseTLS {
		c, err := xdsTLS(s)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(c)
	}
	x := &xdsSource{s: s, st: st, log: log, label: "xDS " + s.XDSServerURL,
		dial: []grpc.DialOption{grpc.WithTransportCredentials(creds)}}
	if s.XDSMaxMsgSize > 0 {
		x.dial = append(x.dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.XDSMaxMsgSize)))
	}
	md := map[string]*structpb.Value{}
	for _, kv := range strings.Split(s.XDSNodeMetadata, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			md[k] = structpb.NewStringValue(v)
		}
	}
	x.node = &corev3.Node{Id: s.XDSNodeID, Metadata: &structpb.Struct{Fields: md}}
	return x, nil
}

// run subscribes until ctx ends.
func (x *xdsSource) run(ctx context.Context) {
	ctx = metadata.NewOutgoingContext(ctx, metadata.New(x.s.XDSHeaders))
	wait := x.s.XDSBackoffInitial
	for {
		received, err := x.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			wait = x.s.XDSBackoffInitial
		}
		d := wait
		if x.s.XDSBackoffJitter && x.s.XDSBackoffFactor > 0 {
			d = time.Duration(float64(d) * (1 + x.s.XDSBackoffFactor*(2*rand.Float64()-1)))
		}
		x.log.Warn("xDS stream ended; reconnecting", "server", x.s.XDSServerURL, "in", d.Round(time.Millisecond).String(), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		wait = min(2*wait, x.s.XDSBackoffMax)
	}
}

// session runs one stream until it fails; received says whether the
// server answered at all (the backoff starts over then).
func (x *xdsSource) session(ctx context.Context) (received bool, err error) {
	conn, err := grpc.NewClient(x.s.XDSServerURL, x.dial...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := sotw.NewADSClient(ctx, x.node, rateLimitConfigType)
	if err := client.InitConnect(conn); err != nil {
		return false, err
	}
	var refused [sha256.Size]byte // the resources last refused
	for {
		resp, err := client.Fetch()
		if err != nil {
			return received, err
		}
		if !received {
			x.log.Info("xDS stream open", "server", x.s.XDSServerURL, "node", x.node.Id)
		}
		received = true
		cfg, err := xdsConfig(resp.Resources, envoy.ConfigOptions{MergeDomains: x.s.MergeDomains})
		if err != nil {
			// A server answers a NACK with the same resources again (the
			// snapshot cache does): those are refused once in the log and
			// the metrics, and NACKed again at most once a second.
			if sum := resourcesSum(resp.Resources); sum != refused {
				refused = sum
				x.st.refuse(err, x.label)
			} else {
				select {
				case <-ctx.Done():
					return received, ctx.Err()
				case <-time.After(time.Second):
				}
			}
			if err := client.Nack(err.Error()); err != nil {
				return received, err
			}
			continue
		}
		refused = [sha256.Size]byte{}
		x.st.apply(cfg, x.label)
		if err := client.Ack(); err != nil {
			return received, err
		}
	}
}

func resourcesSum(resources []*anypb.Any) [sha256.Size]byte {
	h := sha256.New()
	for _, r := range resources {
		h.Write([]byte(r.TypeUrl))
		h.Write([]byte{0})
		h.Write(r.Value)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// xdsConfig loads RateLimitConfig resources as the files they stand for
// (the reference's ConfigXdsProtoToYaml), one file per resource named
// xds:<name>, through the files' own parser and checks.
func xdsConfig(resources []*anypb.Any, opts envoy.ConfigOptions) (*envoy.Config, error) {
	files := make([]envoy.File, 0, len(resources))
	for i, res := range resources {
		var pb confpb.RateLimitConfig
		if err := res.UnmarshalTo(&pb); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		data, err := yaml.Marshal(xdsRoot{Domain: pb.Domain, Descriptors: xdsDescriptors(pb.Descriptors)})
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", pb.Name, err)
		}
		files = append(files, envoy.File{Name: "xds:" + pb.Name, Data: data})
	}
	return envoy.ParseConfig(files, opts)
}

type xdsRoot struct {
	Domain      string          `yaml:"domain"`
	Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
}

type xdsDescriptor struct {
	Key            string          `yaml:"key"`
	Value          string          `yaml:"value,omitempty"`
	RateLimit      *xdsRateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []xdsDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
}

type xdsRateLimit struct {
	Unit            string       `yaml:"unit,omitempty"`
	RequestsPerUnit uint32       `yaml:"requests_per_unit"`
	Unlimited       bool         `yaml:"unlimited,omitempty"`
	Name            string       `yaml:"name,omitempty"`
	Replaces        []xdsReplace `yaml:"replaces,omitempty"`
}

type xdsReplace struct {
	Name string `yaml:"name"`
}

func xdsDescriptors(pbs []*confpb.RateLimitDescriptor) []xdsDescriptor {
	ds := make([]xdsDescriptor, len(pbs))
	for i, pb := range pbs {
		ds[i] = xdsDescriptor{Key: pb.Key, Value: pb.Value, Descriptors: xdsDescriptors(pb.Descriptors),
			ShadowMode: pb.ShadowMode, DetailedMetric: pb.DetailedMetric}
		if p := pb.RateLimit; p != nil {
			rl := &xdsRateLimit{RequestsPerUnit: p.RequestsPerUnit, Unlimited: p.Unlimited, Name: p.Name}
			if p.Unit != confpb.RateLimitUnit_UNKNOWN {
				rl.Unit = p.Unit.String()
			}
			for _, r := range p.Replaces {
				rl.Replaces = append(rl.Replaces, xdsReplace{Name: r.Name})
			}
			ds[i].RateLimit = rl
		}
	}
	return ds
}
