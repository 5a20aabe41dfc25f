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
	key  Key    // the in-process tables', built once
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

// Key is what an in-process table keeps of a policy besides its numbers:
// its name's hash and handle, and its shape's handle. NewPolicy builds
// it once, with what it was built from: a policy whose fields were
// changed since is keyed afresh.
type Key struct {
	Hash  uint64                // of the name
	Name  unique.Handle[string] // compared as one word
	Shape unique.Handle[Shape]
	of    string // the name it was built from
	ofSh  Shape  // the shape it was built from
}

// nameSeed hashes policy names for every table.
var nameSeed = maphash.MakeSeed()

// MemKey returns p's key as NewPolicy built it; it fits p only while p's
// fields are unchanged (see Key.Fits).
func (p *Policy) MemKey() *Key { return &p.key }

// KeyOf returns p's Key.
func KeyOf(p *Policy) Key {
	if p.key.Fits(p) {
		return p.key
	}
	return newKey(p)
}

// Fits reports whether k was built from p as it is. (No valid policy has
// the zero shape: Refill > 0.)
func (k *Key) Fits(p *Policy) bool { return k.ofSh == ShapeOf(p) && k.of == p.Name }

// NewKey returns p's Key, built now.
func NewKey(p *Policy) Key { return newKey(p) }

func newKey(p *Policy) Key {
	sp := ShapeOf(p)
	return Key{Hash: maphash.String(nameSeed, p.Name), Name: unique.Make(p.Name), Shape: unique.Make(sp), of: p.Name, ofSh: sp}
}

// Shape is a policy's arithmetic without its name: what a bucket needs
// to be read under another policy.
type Shape struct{ Capacity, Refill, Unit, Tick int64 }

// ShapeOf returns p's Shape.
func ShapeOf(p *Policy) Shape { return Shape{p.Capacity, p.Refill, p.Unit, p.Tick} }

// Policy returns the shape as a nameless Policy, for its arithmetic.
func (sp *Shape) Policy() Policy {
	return Policy{Capacity: sp.Capacity, Refill: sp.Refill, Unit: sp.Unit, Tick: sp.Tick}
}
