package faultproxy

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
)

// link is one proxied connection: the client's socket and the one the proxy
// dialed to the target for it.
type link struct {
	client net.Conn
	server net.Conn // guarded by Proxy.mu; nil until dialed, and for ever if accepted under a black hole
	closed bool     // guarded by Proxy.mu: detached, its sockets closed or about to be

	// lost reports that the link dropped bytes or a close: its stream is
	// broken, so it never forwards again and Resume resets it. It is set
	// only with Proxy.mu held (see Proxy.blackholed).
	lost atomic.Bool
}

// bufSize is the size of each direction's copy buffer.
const bufSize = 32 << 10

// forward dials the target for l and copies bytes both ways until both
// directions have ended, or the link is detached.
func (p *Proxy) forward(l *link) {
	defer p.wg.Done()
	var d net.Dialer
	network := "tcp"
	if strings.HasPrefix(p.target, "/") {
		network = "unix"
	}
	server, err := d.DialContext(p.ctx, network, p.target)
	if err != nil {
		// The target is down or Close interrupted the dial: the client sees
		// its connection reset, as it would without the proxy.
		p.reset(l)
		return
	}
	p.mu.Lock()
	if l.closed {
		// CutAll or Close detached l while it was dialing.
		p.mu.Unlock()
		_ = server.Close()
		return
	}
	l.server = server
	p.mu.Unlock()

	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		p.pipe(l, server, l.client)
	}()
	p.pipe(l, l.client, server)
	<-upDone

	if !l.lost.Load() {
		p.mu.Lock()
		conns := p.detachLocked(l)
		p.mu.Unlock()
		shut(conns, false)
	}
	// A lost link stays open, silent, until Resume, CutAll or Close.
}

// swallow reads and drops everything the client of l sends, for a link
// accepted under a black hole, until l is closed.
func (p *Proxy) swallow(l *link) {
	defer p.wg.Done()
	_, _ = io.Copy(dropWriter{p}, l.client)
}

// pipe copies src to dst until src ends or a copy fails, dropping what it
// reads while the network is black-holed or the link is lost.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.pass(l, n) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			p.end(l, dst, err)
			return
		}
	}
}

// pass reports whether n bytes just read on l are to be forwarded; if not,
// it counts them as dropped and marks l lost.
func (p *Proxy) pass(l *link, n int) bool {
	if !p.blackholed.Load() && !l.lost.Load() {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blackholed.Load() && !l.lost.Load() {
		return true // Resume came in between
	}
	l.lost.Store(true)
	p.dropped.Add(int64(n))
	return false
}

// end handles the end of one direction of l, which read or wrote err. In
// the open, an EOF is passed on as a half-close and any other error resets
// both sides; in a black hole, the end is lost like the bytes.
func (p *Proxy) end(l *link, dst net.Conn, err error) {
	p.mu.Lock()
	if p.blackholed.Load() || l.lost.Load() {
		l.lost.Store(true)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if errors.Is(err, io.EOF) {
		if tc, ok := dst.(*net.TCPConn); ok {
			// The other direction may still have bytes to carry.
			_ = tc.CloseWrite()
			return
		}
	}
	p.reset(l)
}

// reset detaches l and closes its sockets with RST.
func (p *Proxy) reset(l *link) {
	p.mu.Lock()
	conns := p.detachLocked(l)
	p.mu.Unlock()
	shut(conns, true)
}

// dropWriter counts and discards what is written to it.
type dropWriter struct{ p *Proxy }

func (w dropWriter) Write(b []byte) (int, error) {
	w.p.dropped.Add(int64(len(b)))
	return len(b), nil
}
