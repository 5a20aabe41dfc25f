// Package faultproxy is a loopback TCP proxy for fault tests: it forwards to
// a real server until told to refuse connections, stall (accept and never
// answer), add latency (to every reply, or to a new connection's setup),
// or drop every connection.
package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	Forward Mode = iota // pass bytes both ways
	Stall               // accept connections and keep them, forwarding nothing
	Refuse              // close new and existing connections at once
)

// Proxy forwards a loopback port to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	dial    time.Duration // held before a new connection reaches the server
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Start returns a proxy to target, closed when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode switches behaviour; Refuse and Stall also affect open connections.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	if m == Refuse {
		p.dropLocked()
	}
	p.mu.Unlock()
}

// SetLatency delays every chunk forwarded toward the client by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetDialLatency holds each new connection for d before it reaches the
// server, as a slow dial would (a SYN retransmitted, a TLS handshake far
// away): what the client sends waits, and so does its first reply.
func (p *Proxy) SetDialLatency(d time.Duration) {
	p.mu.Lock()
	p.dial = d
	p.mu.Unlock()
}

// DropAll closes every open connection (a server restart, to the client).
func (p *Proxy) DropAll() {
	p.mu.Lock()
	p.dropLocked()
	p.mu.Unlock()
}

func (p *Proxy) dropLocked() {
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.dropLocked()
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.mode == Refuse {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	p.mu.Lock()
	dial := p.dial
	p.mu.Unlock()
	time.Sleep(dial)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c, false); done <- struct{}{} }()
	p.pipe(c, up, true)
	up.Close()
	c.Close()
	<-done
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	if p.closed {
		c.Close()
	} else {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
}

// pipe copies src to dst, holding bytes while stalled. Toward the client
// it is a delay line: each chunk is written latency after it was read, so
// replies pipelined on one connection are each delayed once, not in turn.
func (p *Proxy) pipe(dst, src net.Conn, toClient bool) {
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
			for {
				p.mu.Lock()
				mode, lat, closed := p.mode, p.latency, p.closed
				p.mu.Unlock()
				if closed || mode == Refuse {
					return
				}
				if mode == Stall {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if !toClient {
					lat = 0
				}
				line <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(lat)}
				break
			}
		}
		if err != nil {
			return // EOF or a closed connection: either way, done
		}
	}
}
