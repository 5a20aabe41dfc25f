package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/ratelimit/core"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"
)

// File is one configuration file: its name, as errors and logs show it,
// and its YAML.
type File struct {
	Name string
	Data []byte
}

// Config is a loaded set of configuration files: one rule tree per domain.
// It is immutable once loaded, so a Service swaps whole configs and a
// request sees one config from its start to its answer.
type Config struct {
	domains map[string]*node
	files   map[string]string // the file that brought each domain
}

// ConfigOptions change how ParseConfig reads files.
type ConfigOptions struct {
	// MergeDomains accepts one domain in several files, merging their
	// descriptors, as the reference's MERGE_DOMAIN_CONFIG=true; by default
	// a domain in two files refuses the config.
	MergeDomains bool
}

// rule is one rate limit of the configuration: what a matching descriptor
// is decided by.
type rule struct {
	// Name is the core policy name the rule's buckets live under (see the
	// package doc, "Buckets"): its FullKey when that is a valid core name,
	// else "envoy-" and a digest of it.
	Name string
	// FullKey is the reference's key of the rule, "domain.key_value.key",
	// as its statistics name it.
	FullKey string
	// RequestsPerUnit, Unit and UnitMultiplier are the limit as configured
	// (UnitMultiplier at least 1). The bucket holds RequestsPerUnit tokens
	// and refills them every Unit × UnitMultiplier.
	RequestsPerUnit uint32
	Unit            unit
	UnitMultiplier  uint32
	// Unlimited allows every request without touching the store.
	Unlimited bool
	// ShadowMode decides as usual but never refuses a request for this rule.
	ShadowMode bool
	// DetailedMetric labels the reference's metrics by the request's
	// values rather than the rule's key.
	DetailedMetric bool
	// Usage marks a limit charged after the fact (our extension): hits are
	// taken as debt and never refused; a check (hits_addend 0) is refused
	// while the bucket owes.
	Usage bool
	// LimitName is rate_limit.name, echoed in current_limit and used by
	// replaces.
	LimitName string
	// Replaces lists the LimitNames this rule replaces when both match
	// one request.
	Replaces []string
	// current is the rule's limit as statuses report it (current_limit),
	// shared by every response.
	current *rlspb.RateLimitResponse_RateLimit
}

// Limit returns the rule's token bucket; ok is false for a rule that
// refuses everything (requests_per_unit 0) or allows everything
// (unlimited), which never reach the store.
func (r *rule) Limit() (core.Limit, bool) {
	if r.Unlimited || r.RequestsPerUnit == 0 {
		return core.Limit{}, false
	}
	return unitLimit(r.RequestsPerUnit, r.Unit, r.UnitMultiplier), true
}

func unitLimit(rpu uint32, u unit, mult uint32) core.Limit {
	if mult == 0 {
		mult = 1
	}
	return core.Limit{Rate: int(rpu), Period: u.Duration() * time.Duration(mult), Burst: int(rpu)}
}

// unit is a rate limit's unit, numbered as the RLS API's
// RateLimitResponse.RateLimit.Unit.
type unit int32

// The units of the RLS API.
const (
	unitUnknown unit = 0
	unitSecond  unit = 1
	unitMinute  unit = 2
	unitHour    unit = 3
	unitDay     unit = 4
	unitMonth   unit = 5
	unitYear    unit = 6
	unitWeek    unit = 7
)

var unitNames = map[string]unit{
	"second": unitSecond, "minute": unitMinute, "hour": unitHour, "day": unitDay,
	"week": unitWeek, "month": unitMonth, "year": unitYear,
}

// Duration is the unit's length, as the reference counts it: a month is
// 30 days, a year 365.
func (u unit) Duration() time.Duration {
	switch u {
	case unitSecond:
		return time.Second
	case unitMinute:
		return time.Minute
	case unitHour:
		return time.Hour
	case unitDay:
		return 24 * time.Hour
	case unitWeek:
		return 7 * 24 * time.Hour
	case unitMonth:
		return 30 * 24 * time.Hour
	case unitYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key" or "key_value"
	wildcards []wildcard       // children whose value holds '*', in file order
	rule      *rule

	shareThreshold bool   // wildcard values share one bucket
	pattern        string // the wildcard value, for shareThreshold
}

type wildcard struct {
	key   string   // the child's "key_value" with its '*'
	parts []string // key split on '*'
}

// validKeys are the keys the reference's loader accepts anywhere in a file,
// plus ours (usage, unit_multiplier). Any other key refuses the file, as it
// does there, so a misspelt key never silently drops a limit.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true, "unlimited": true,
	"shadow_mode": true, "quota_mode": true, "name": true, "replaces": true,
	"detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	"metadata": true,
	// Ours.
	"usage": true, "unit_multiplier": true,
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	UnitMultiplier  uint32 `yaml:"unit_multiplier"`
	Unlimited       bool   `yaml:"unlimited"`
	Usage           bool   `yaml:"usage"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// maxNodes bounds the YAML nodes of one file once its aliases are
// expanded, so that a few KB of nested aliases (an alias bomb) are refused
// rather than expanded into billions of nodes.
const maxNodes = 1 << 20

// ParseConfig loads files into one Config, all or nothing: the first
// mistake in any file refuses the whole set, with an error naming the
// file. An empty set is a valid config with no domains. A file whose
// aliases expand it beyond 2^20 YAML nodes is refused.
func ParseConfig(files []File, opts ConfigOptions) (*Config, error) {
	c := &Config{domains: make(map[string]*node), files: make(map[string]string)}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, f := range sorted {
		if err := c.load(f, opts); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errConfig, f.Name, err)
		}
	}
	return c, nil
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// String lists the rules, one a line in the reference's /rlconfig format
// ("domain.key_value: unit=MINUTE requests_per_unit=10, shadow_mode:
// false, quota_mode: false"), domains and keys sorted; unlimited rules
// say unlimited=true.
func (c *Config) String() string {
	var b strings.Builder
	for _, d := range c.Domains() {
		c.domains[d].dump(&b)
	}
	return b.String()
}

func (n *node) dump(b *strings.Builder) {
	if r := n.rule; r != nil {
		unit := "UNKNOWN"
		for name, u := range unitNames {
			if u == r.Unit {
				unit = strings.ToUpper(name)
			}
		}
		fmt.Fprintf(b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: false", r.FullKey, unit, r.RequestsPerUnit, r.ShadowMode)
		if r.Unlimited {
			b.WriteString(", unlimited=true")
		}
		if r.UnitMultiplier > 1 {
			fmt.Fprintf(b, ", unit_multiplier=%d", r.UnitMultiplier)
		}
		if r.Usage {
			b.WriteString(", usage=true")
		}
		b.WriteByte('\n')
	}
	keys := make([]string, 0, len(n.children))
	for k := range n.children {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n.children[k].dump(b)
	}
}

// ruleCounts returns the number of rules of each domain.
func (c *Config) ruleCounts() map[string]int {
	counts := make(map[string]int, len(c.domains))
	for d, n := range c.domains {
		counts[d] = n.rules()
	}
	return counts
}

func (n *node) rules() int {
	c := 0
	if n.rule != nil {
		c = 1
	}
	for _, ch := range n.children {
		c += ch.rules()
	}
	return c
}

func (c *Config) load(f File, opts ConfigOptions) error {
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("config file cannot have empty domain")
		}
		return fmt.Errorf("error loading config file: %w", err)
	}
	if n := expanded(&doc, make(map[*yaml.Node]int)); n > maxNodes {
		return fmt.Errorf("its aliases expand it beyond %d YAML nodes", maxNodes)
	}
	if err := checkKeys(&doc); err != nil {
		return err
	}
	var root yamlRoot
	if err := doc.Decode(&root); err != nil {
		return fmt.Errorf("error loading config file: %w", err)
	}
	if root.Domain == "" {
		return errors.New("config file cannot have empty domain")
	}
	dom, present := c.domains[root.Domain]
	if present && !opts.MergeDomains {
		return fmt.Errorf("duplicate domain '%s' in config file (first in %s)", root.Domain, c.files[root.Domain])
	}
	if !present {
		dom = &node{children: make(map[string]*node)}
		c.domains[root.Domain] = dom
		c.files[root.Domain] = f.Name
	}
	return dom.load(root.Domain+".", root.Descriptors, opts)
}

// expanded counts the nodes under n with its aliases expanded, up to a
// little over maxNodes; memo holds the counts of the nodes seen, so the
// count costs one visit per node however the aliases nest.
func expanded(n *yaml.Node, memo map[*yaml.Node]int) int {
	if n == nil {
		return 0
	}
	if c, ok := memo[n]; ok {
		return c
	}
	memo[n] = maxNodes + 1 // an alias to its own ancestor: refused
	c := 1
	if n.Kind == yaml.AliasNode {
		c += expanded(n.Alias, memo)
	}
	for _, k := range n.Content {
		if c += expanded(k, memo); c > maxNodes {
			break
		}
	}
	c = min(c, maxNodes+1)
	memo[n] = c
	return c
}

// checkKeys refuses keys outside validKeys, anywhere but under metadata
// (free-form, as in the reference), and lists of anything but maps.
func checkKeys(n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkKeys(c); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "") {
				return fmt.Errorf("config error, key is not of type string: %v (line %d)", k.Value, k.Line)
			}
			if !validKeys[k.Value] {
				return fmt.Errorf("config error, unknown key '%s' (line %d)", k.Value, k.Line)
			}
			if k.Value == "metadata" {
				continue
			}
			if err := checkKeys(v); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("config error, yaml file contains list of type other than map: %v (line %d)", e.Value, e.Line)
			}
			if err := checkKeys(e); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return checkKeys(n.Alias)
	}
	return nil
}

func (n *node) load(parent string, ds []yamlDescriptor, opts ConfigOptions) error {
	for _, d := range ds {
		if d.Key == "" {
			return errors.New("descriptor has empty key")
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		full := parent + final
		if _, dup := n.children[final]; dup {
			return fmt.Errorf("duplicate descriptor composite key '%s'", full)
		}
		child := &node{children: make(map[string]*node)}
		if d.RateLimit != nil {
			r, err := newRule(full, d)
			if err != nil {
				return err
			}
			child.rule = r
		}
		if d.ShareThreshold {
			if !strings.Contains(final, "*") {
				return fmt.Errorf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)
			}
			child.shareThreshold = true
			child.pattern = d.Value
		}
		if strings.Contains(final, "*") {
			n.wildcards = append(n.wildcards, wildcard{key: final, parts: strings.Split(final, "*")})
		}
		if err := child.load(full+".", d.Descriptors, opts); err != nil {
			return err
		}
		n.children[final] = child
	}
	return nil
}

func newRule(full string, d yamlDescriptor) (*rule, error) {
	y := d.RateLimit
	unit, validUnit := unitNames[strings.ToLower(y.Unit)]
	switch {
	case y.Unlimited && validUnit:
		return nil, errors.New("should not specify rate limit unit when unlimited")
	case !y.Unlimited && !validUnit:
		return nil, fmt.Errorf("invalid rate limit unit '%s'", y.Unit)
	}
	r := &rule{
		FullKey:         full,
		Name:            policyName(full),
		RequestsPerUnit: y.RequestsPerUnit,
		Unit:            unit,
		UnitMultiplier:  max(y.UnitMultiplier, 1),
		Unlimited:       y.Unlimited,
		ShadowMode:      d.ShadowMode,
		DetailedMetric:  d.DetailedMetric,
		Usage:           y.Usage,
		LimitName:       y.Name,
	}
	r.current = &rlspb.RateLimitResponse_RateLimit{
		Name: r.LimitName, RequestsPerUnit: r.RequestsPerUnit,
		Unit: rlspb.RateLimitResponse_RateLimit_Unit(r.Unit),
	}
	if r.UnitMultiplier > 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
	}
	for _, rep := range y.Replaces {
		if rep.Name == "" {
			return nil, errors.New("should not have an empty replaces entry")
		}
		if rep.Name == y.Name {
			return nil, errors.New("replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, rep.Name)
	}
	if r.Usage && r.Unlimited {
		return nil, fmt.Errorf("usage limit '%s' cannot be unlimited", full)
	}
	if lim, ok := r.Limit(); ok {
		if err := lim.Validate(); err != nil {
			return nil, fmt.Errorf("rate limit of '%s': %w", full, err)
		}
	}
	return r, nil
}
