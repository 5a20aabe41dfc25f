package bench

import (
	"net"
	"sync"
	"time"
)

// DelayProxy is a loopback TCP proxy that delays every reply by a fixed
// latency, as a Redis in another zone would: a delay line, each chunk read
// from the server written to the client latency after it was read, so that
// replies pipelined on one connection are each delayed once, not in turn.
// Requests pass at once. (A copy of the library's internal/faultproxy delay
// line, which this module cannot import.)
type DelayProxy struct {
	ln      net.Listener
	target  string
	latency time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartDelayProxy listens on a free loopback port and forwards every
// connection to target, adding latency to each reply.
func StartDelayProxy(target string, latency time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, target: target, latency: latency, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// Latency is the delay added to each reply.
func (p *DelayProxy) Latency() time.Duration { return p.latency }

// Close stops the proxy and closes every connection.
func (p *DelayProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c for Close; false (c closed) once the proxy is closed.
func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *DelayProxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(up) {
		p.untrack(c)
		return
	}
	defer p.untrack(c, up)
	defer up.Close()
	done := make(chan struct{})
	go func() { defer close(done); p.delayed(c, up); c.Close() }()
	copyTo(up, c)
	up.Close()
	c.Close()
	<-done
}

// copyTo forwards requests as they come.
func copyTo(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// delayed forwards replies from src to dst, each chunk latency after it
// was read.
func (p *DelayProxy) delayed(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	line := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range line {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				dst.Close()
				src.Close()
				for range line { // let the reader finish
				}
				return
			}
		}
	}()
	defer func() { close(line); <-done }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			line <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(p.latency)}
		}
		if err != nil {
			return
		}
	}
}
