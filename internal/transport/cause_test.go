package transport

import (
	"errors"
	"testing"
)

// replyError is an error reply of a server, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestCrossSlotRefusals (issue 36, item 16): the refusals of the
// cross-slot batch script that send a Cluster node's batches per subject
// for good — Redis before 7's, and Dragonfly's, which refuses the script's
// flag or, taking it, the keys it did not declare — and only those.
func TestCrossSlotRefusals(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{replyError("ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'"), true},
		{replyError("ERR Unexpected flag in script shebang: allow-cross-slot-keys"), true},
		{replyError("Invalid flag: allow-cross-slot-keys"), true},
		{replyError("ERR Error running script (call to 5c4d62f4e30c54fb15935b5892148e5ce7374077): @user_script:2: script tried accessing undeclared key"), true},
		{replyError("ERR Error running script (call to 5c4d62f4e30c54fb15935b5892148e5ce7374077): @user_script:2: script tried accessing undeclared key, key: p:{bob}:five"), true},
		{replyError("ERR Script attempted to access a non local key in a cluster node script"), false},
		{replyError("NOSCRIPT No matching script. Please use EVAL."), false},
		{replyError("MOVED 3999 127.0.0.1:6381"), false},
		{errors.New("dial tcp: script tried accessing undeclared key"), false}, // not a server's reply
		{nil, false},
	} {
		if got := noScriptFlags(tc.err); got != tc.want {
			t.Errorf("noScriptFlags(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
