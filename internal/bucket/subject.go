package bucket

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxRawSubject is the longest subject a store keeps as it is: a longer
// one is digested, so a key of any length costs bounded memory.
const MaxRawSubject = 64

// HashSubject returns subject, or a digest of it when it is long or could
// break or forge a Redis Cluster hash tag. Digests start with '~', and raw
// subjects starting with '~' are digested too, so the two forms never meet.
func HashSubject(subject string) string {
	if len(subject) <= MaxRawSubject && !strings.ContainsAny(subject, "{}") && !strings.HasPrefix(subject, "~") {
		return subject
	}
	sum := sha256.Sum256([]byte(subject))
	return "~" + hex.EncodeToString(sum[:16])
}
