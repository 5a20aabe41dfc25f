// Package transport carries package core's Redis store calls: the
// scripts and their encoding, the replies, the deadline clock the calls
// run under, and why a call failed (the client's dial errors, Redis's
// answers about slots and scripts). core.RedisStore is its exported face;
// nothing here is API.
package transport
