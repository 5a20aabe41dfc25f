package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// entry is one entry of a rate limit descriptor: what Envoy's actions
// produced for a request (remote_address=203.0.113.7, generic_key=api, …).
type entry struct {
	Key, Value string
}

// match finds the rule that decides a descriptor of domain, as the
// reference's loader does: each entry is looked up by "key_value", then by
// a wildcard value in file order, then by "key" alone, one level per entry,
// and the rule applies only when it sits at the level of the last entry.
// It returns the rule and the subject of the descriptor's bucket (see the
// package doc, "Buckets"); r is nil when nothing matches.
func (c *Config) match(domain string, entries []entry) (r *rule, subject string) {
	dom := c.domains[domain]
	if dom == nil || len(entries) == 0 {
		return nil, ""
	}
	values := make([]string, len(entries))
	n := dom
	for i, e := range entries {
		values[i] = e.Value
		final := e.Key + "_" + e.Value
		next := n.children[final]
		if next == nil {
			for _, w := range n.wildcards {
				if wildcardMatch(w.parts, final) {
					next = n.children[w.key]
					break
				}
			}
			if next != nil && next.shareThreshold {
				values[i] = next.pattern
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next == nil {
			return nil, ""
		}
		if i == len(entries)-1 {
			if next.rule == nil {
				return nil, ""
			}
			return next.rule, subjectOf(values)
		}
		n = next
	}
	return nil, ""
}

// ownKey is the first part of the key of a descriptor that carries its
// own limit but matches no rule: the domain and the entries' keys, as a
// rule of key-only entries would be named.
func ownKey(domain string, entries []entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
	}
	return b.String()
}

// subjectOf joins a descriptor's values into the subject of its bucket: the
// values in order, separated by '|', each '\' and '|' inside a value
// escaped with '\'. A single value is its own subject ("203.0.113.7");
// an empty subject is written "|".
func subjectOf(values []string) string {
	if len(values) == 1 && values[0] != "" && !strings.ContainsAny(values[0], `\|`) {
		return values[0]
	}
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte('|')
		}
		if strings.ContainsAny(v, `\|`) {
			v = subjectEscaper.Replace(v)
		}
		b.WriteString(v)
	}
	if b.Len() == 0 {
		return "|"
	}
	return b.String()
}

var subjectEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`)

// policyName is full when core accepts it as a policy name (1–64 printable
// ASCII characters without spaces, braces, quotes or backslashes), else
// "envoy-" and the first 32 hex digits of its SHA-256.
func policyName(full string) string {
	ok := len(full) >= 1 && len(full) <= 64
	for i := 0; ok && i < len(full); i++ {
		c := full[i]
		ok = c > ' ' && c < 0x7f && c != '{' && c != '}' && c != '"' && c != '\\'
	}
	if ok {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	return "envoy-" + hex.EncodeToString(sum[:16])
}

// wildcardMatch reports whether value matches a pattern split on '*', each
// '*' standing for any run of characters.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || len(value) < len(first)+len(last) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
