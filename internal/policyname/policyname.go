// Package policyname is the seam through which this module's packages
// decide under a policy name other than a limiter's own, through that
// limiter's guard: core.Limiter.Under takes a Name, and only packages of
// module github.com/sluicehq/ratelimit (the Envoy service's among them)
// can make one, so users never meet it. The Envoy service decides every
// configured rule so, with one limiter's breakers, bound, denial cache
// and report (DESIGN §12, "On core's engine").
package policyname

// Name is a policy name, as core.Config.Name (1–64 printable ASCII
// characters without spaces, braces, quotes or backslashes; core checks).
// The zero value is no name.
type Name struct{ s string }

// Of returns s as a Name.
func Of(s string) Name { return Name{s} }

// String returns the name.
func (n Name) String() string { return n.s }
