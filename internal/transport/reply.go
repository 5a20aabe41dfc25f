package transport

// NextInt parses the non-negative integer that starts s, up to a comma,
// and returns what follows the comma.
func NextInt(s string) (v int64, rest string, ok bool) {
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

// FieldsEnd returns the end of the first n comma-separated fields of s,
// or -1 when s has fewer.
func FieldsEnd(s string, n int) int {
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

// Truncate shortens a reply quoted in an error.
func Truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
