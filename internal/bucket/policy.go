package bucket

import (
	"hash/maphash"
	"strconv"
	"unique"
)

// Policy is one limit in the integer form the stores compute with: tokens
// are counted in units, Unit units to a token, and Refill units arrive
// every Tick microseconds (1, or 1000 or 10^6 for limits whose numbers
// would not fit below 2^53 in microseconds). Both stay exact: no
// rounding ever accumulates. NewPolicy builds one with what the stores
// derive from it built once; a Policy literal works too, at the cost of
// building those per call.
type Policy struct {
	Name     string // namespaces the bucket: one bucket per (Name, subject)
	Capacity int64  // bucket capacity in units (Burst × Unit)
	Refill   int64  // units added per tick
	Unit     int64  // units per token
	Tick     int64  // µs per tick

	desc string // "Capacity:Refill:Unit:Tick", the scripts' argument, built once
	arg  any    // desc, boxed once
	key  memKey // the in-process tables', built once
}

// NewPolicy returns the policy named name with these numbers, its script
// argument and table key built once.
func NewPolicy(name string, capacity, refill, unit, tick int64) Policy {
	p := Policy{Name: name, Capacity: capacity, Refill: refill, Unit: unit, Tick: tick}
	p.desc = p.Desc()
	p.arg = p.desc
	p.key = newKey(&p)
	return p
}

// Desc returns p's script argument, "Capacity:Refill:Unit:Tick", built
// once by NewPolicy.
func (p *Policy) Desc() string {
	if p.desc != "" {
		return p.desc
	}
	return strconv.FormatInt(p.Capacity, 10) + ":" + strconv.FormatInt(p.Refill, 10) + ":" +
		strconv.FormatInt(p.Unit, 10) + ":" + strconv.FormatInt(p.Tick, 10)
}

// Arg returns Desc's string, boxed: once by NewPolicy, else now.
func (p *Policy) Arg() any {
	if p.arg != nil {
		return p.arg
	}
	return p.Desc()
}

// memKey is what a Table keeps of a policy besides its numbers: its
// name's hash and handle, and its shape's handle. NewPolicy builds it
// once, with what it was built from: a policy whose fields were changed
// since is keyed afresh.
type memKey struct {
	hash  uint64                // of the name
	name  unique.Handle[string] // compared as one word
	shape unique.Handle[policyShape]
	of    string      // the name it was built from
	ofSh  policyShape // the shape it was built from
}

// nameSeed hashes policy names for every table.
var nameSeed = maphash.MakeSeed()

// memKeyOf returns p's memKey.
func memKeyOf(p *Policy) memKey {
	if p.key.fits(p) {
		return p.key
	}
	return newKey(p)
}

// fits reports whether k was built from p as it is. (No valid policy has
// the zero shape: Refill > 0.)
func (k *memKey) fits(p *Policy) bool { return k.ofSh == shapeOf(p) && k.of == p.Name }

func newKey(p *Policy) memKey {
	sp := shapeOf(p)
	return memKey{hash: maphash.String(nameSeed, p.Name), name: unique.Make(p.Name), shape: unique.Make(sp), of: p.Name, ofSh: sp}
}

// policyShape is a policy's arithmetic without its name: what a bucket
// needs to be read under another policy.
type policyShape struct{ capacity, refill, unit, tick int64 }

// shapeOf returns p's policyShape.
func shapeOf(p *Policy) policyShape { return policyShape{p.Capacity, p.Refill, p.Unit, p.Tick} }

// policy returns the shape as a nameless Policy, for its arithmetic.
func (sp *policyShape) policy() Policy {
	return Policy{Capacity: sp.capacity, Refill: sp.refill, Unit: sp.unit, Tick: sp.tick}
}
