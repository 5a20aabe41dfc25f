package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports for servers of a test's own come from [portLow, portHigh). With the
// cluster bus at port+busOffset, both stay below Linux's default ephemeral
// range (32768–60999), so an outgoing connection never holds one of them.
const (
	portLow   = 10000
	portHigh  = 22000
	busOffset = 10000
)

// taken holds the ports this process has handed out, so two servers of one
// test binary never race for the same port. Other processes are caught by
// the bind check here and by retrying when redis-server cannot bind.
var (
	takenMu sync.Mutex
	taken   = map[int]bool{}
)

// freePort returns a loopback port nobody listens on, whose cluster bus
// port (port+10000) is free too.
func freePort() (int, error) {
	takenMu.Lock()
	defer takenMu.Unlock()
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow)
		if taken[p] || !canListen(p) || !canListen(p+busOffset) {
			continue
		}
		taken[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free loopback port pair (p, p+%d) in [%d, %d)", busOffset, portLow, portHigh)
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
