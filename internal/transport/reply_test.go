package transport

import "testing"

// TestNextInt: a reply's integers, one per comma, never a sign, a float,
// an empty field, a trailing comma or a number past 2^62.
func TestNextInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		v    int64
		rest string
		ok   bool
	}{
		{"1,20,3", 1, "20,3", true},
		{"42", 42, "", true},
		{"4611686018427387904", 4611686018427387904, "", true},
		{"46116860184273879040", 0, "", false},
		{"", 0, "", false},
		{",1", 0, "", false},
		{"1,", 0, "", false},
		{"-1", 0, "", false},
		{"1.5", 0, "", false},
	} {
		v, rest, ok := nextInt(tc.in)
		if v != tc.v || rest != tc.rest || ok != tc.ok {
			t.Errorf("nextInt(%q) = %d, %q, %v; want %d, %q, %v", tc.in, v, rest, ok, tc.v, tc.rest, tc.ok)
		}
	}
}

// TestFieldsEnd: where the first n fields of a batch's reply end.
func TestFieldsEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want int
	}{
		{"1,2,3,4", 2, 3},
		{"1,2,3,4", 4, 7},
		{"1,2,3,4", 5, -1},
		{"", 1, -1},
	} {
		if got := fieldsEnd(tc.in, tc.n); got != tc.want {
			t.Errorf("fieldsEnd(%q, %d) = %d, want %d", tc.in, tc.n, got, tc.want)
		}
	}
}
