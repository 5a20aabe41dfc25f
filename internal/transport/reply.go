package transport

import (
	"fmt"
	"time"

	"github.com/sluicehq/ratelimit/internal/bucket"
)

// ParseReply reads one request's part of the script's reply: allowed,
// then per policy whole tokens left, µs until n tokens exist and µs until
// the bucket is full, separated by commas, and for a waiting operation
// one more field (bucket.Outcome.Extra). It returns the binding outcome and fills
// each (when not nil) with every policy's.
func ParseReply(reply string, each []bucket.Outcome) (bucket.Outcome, error) {
	var v [3]int64
	allowed, rest, ok := nextInt(reply)
	if !ok || rest == "" {
		return bucket.Outcome{}, fmt.Errorf("%w: %q", bucket.BadReply, truncate(reply))
	}
	var best bucket.Outcome
	for i := 0; rest != ""; i++ {
		for j := range v {
			if v[j], rest, ok = nextInt(rest); !ok {
				return bucket.Outcome{}, fmt.Errorf("%w: %q", bucket.BadReply, truncate(reply))
			}
			if j == 0 && i > 0 && rest == "" {
				best.Extra = v[0]
				return best, nil
			}
		}
		o := bucket.Outcome{
			Allowed:    allowed == 1,
			Policy:     i,
			Remaining:  v[0],
			RetryAfter: time.Duration(v[1]) * time.Microsecond,
			ResetAfter: time.Duration(v[2]) * time.Microsecond,
		}
		if each != nil {
			if i >= len(each) {
				return bucket.Outcome{}, fmt.Errorf("%w: more outcomes than %d policies", bucket.BadReply, len(each))
			}
			each[i] = o
		}
		if i == 0 || bucket.Binds(o, best) {
			best = o
		}
	}
	return best, nil
}

// nextInt parses the non-negative integer that starts s, up to a comma,
// and returns what follows the comma.
func nextInt(s string) (v int64, rest string, ok bool) {
	i := 0
	for ; i < len(s) && s[i] != ','; i++ {
		c := s[i]
		if c < '0' || c > '9' || v > (1<<62)/10 {
			return 0, "", false
		}
		v = v*10 + int64(c-'0')
	}
	if i == 0 {
		return 0, "", false
	}
	if i < len(s) {
		i++ // the comma
		if i == len(s) {
			return 0, "", false
		}
	}
	return v, s[i:], true
}

// fieldsEnd returns the end of the first n comma-separated fields of s,
// or -1 when s has fewer.
func fieldsEnd(s string, n int) int {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			if n--; n == 0 {
				return i
			}
		}
	}
	if n == 1 && s != "" {
		return len(s)
	}
	return -1
}

// truncate shortens a reply quoted in an error.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
