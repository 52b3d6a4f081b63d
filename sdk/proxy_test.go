package sdk_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// fault is what a proxy does to a batch of statements a client sends.
type fault int

const (
	// forward passes the batch on.
	forward fault = iota
	// cutBefore drops the connection instead of forwarding the batch: the
	// server never gets it.
	cutBefore
	// cutAfter forwards the batch, lets the server answer it in full
	// (ReadyForQuery: it committed or failed) and drops the connection
	// before any of the answer reaches the client: an ambiguous outcome.
	cutAfter
)

// proxy forwards TCP connections from a local port to the test database and
// injects faults into them for real: it cuts a chosen batch (the Nth sent
// through it, counted from when the fault was armed), or stalls every
// connection, new ones included. It parses just enough of the PostgreSQL
// protocol to find where a client's batch starts (its first Execute after a
// Sync) and where the server's answer ends (ReadyForQuery).
type proxy struct {
	ln      net.Listener
	network string // of the database
	target  string

	mu      sync.Mutex
	fault   fault
	every   bool          // the fault hits every batch, not only the nth
	nth     int           // batches still to forward before the fault hits
	batches int           // batches sent through the proxy so far
	stalled chan struct{} // non-nil: forward nothing until the proxy closes
	links   map[*link]struct{}
	cut     chan []byte // the message types of each answer dropped by cutAfter

	done chan struct{}
	wg   sync.WaitGroup
}

// newProxy starts a proxy to the test database, closed at cleanup.
func newProxy(t *testing.T) *proxy {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	network, target := "tcp", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	if h := cfg.ConnConfig.Host; len(h) > 0 && h[0] == '/' {
		network, target = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", h, cfg.ConnConfig.Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, network: network, target: target, links: map[*link]struct{}{},
		cut: make(chan []byte, 16), done: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// pool returns a pool of at most maxConns connections through the proxy,
// closed at cleanup.
func (p *proxy) pool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := p.ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = addr.IP.String(), uint16(addr.Port), nil
	cfg.ConnConfig.TLSConfig = nil
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Closing a connection waits for the server's goodbye, which a stalled
	// proxy would hold back: the proxy closes first.
	t.Cleanup(p.close)
	return pool
}

// arm makes f hit the nth batch sent from now on (1 is the next), or, with
// every, that one and all after it.
func (p *proxy) arm(f fault, nth int, every bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.nth, p.every = f, nth, every
}

// stall stops forwarding on every connection, current and new.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = p.done
	}
}

// sent returns how many batches clients have sent through the proxy.
func (p *proxy) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.batches
}

// batch counts a batch starting and returns the fault that hits it.
func (p *proxy) batch() fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches++
	if p.fault == forward {
		return forward
	}
	if p.nth--; p.nth > 0 {
		return forward
	}
	f := p.fault
	if !p.every {
		p.fault = forward
	}
	return f
}

// hold blocks while the proxy is stalled, until it closes; it reports
// whether forwarding may go on.
func (p *proxy) hold() bool {
	p.mu.Lock()
	stalled := p.stalled
	p.mu.Unlock()
	if stalled == nil {
		return true
	}
	<-stalled
	return false
}

func (p *proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(p.network, p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: server}
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			l.close()
			return
		default:
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.up(l) })
		p.wg.Go(func() { p.down(l) })
	}
}

// close stops the proxy, drops every connection and waits for its
// goroutines. Calling it again does nothing more.
func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
	mu             sync.Mutex
	doomed         bool // cutAfter: drop the server's answer, then the connection
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

func (l *link) setDoomed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doomed = true
}

func (l *link) isDoomed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doomed
}

// up forwards the client's bytes to the server, applying faults to batches.
func (p *proxy) up(l *link) {
	defer l.close()
	f := framer{startup: true}
	buf := make([]byte, 64<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if !p.hold() {
				return
			}
			chunk := buf[:n]
			for range f.batches(chunk) {
				switch p.batch() {
				case cutBefore:
					return
				case cutAfter:
					l.setDoomed()
				}
			}
			if _, err := l.server.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down forwards the server's bytes to the client, unless the link is doomed:
// then it reads the server's answer to its end, reports it and drops the
// connection.
func (p *proxy) down(l *link) {
	defer l.close()
	var answer framer
	var types []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			if !p.hold() {
				return
			}
			if l.isDoomed() {
				types = append(types, answer.types(buf[:n])...)
				for _, t := range types {
					if t == 'Z' {
						select {
						case p.cut <- types:
						default: // nobody waits for this one
						}
						return
					}
				}
				continue
			}
			if _, err := l.client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// framer follows the messages of one direction of a PostgreSQL connection.
type framer struct {
	startup bool   // client side: messages without a type byte (startup, SSL request) come first
	head    []byte // the current message's header, as far as read
	body    int    // bytes of the current message's body not yet read
	inBatch bool   // an Execute was sent since the last Sync
}

// types returns the type bytes of the messages that start in chunk.
func (f *framer) types(chunk []byte) []byte {
	var types []byte
	for len(chunk) > 0 {
		if f.body > 0 {
			n := min(f.body, len(chunk))
			f.body, chunk = f.body-n, chunk[n:]
			continue
		}
		size := 5 // type and length
		if f.startup {
			size = 8 // length and protocol code
		}
		n := min(size-len(f.head), len(chunk))
		f.head, chunk = append(f.head, chunk[:n]...), chunk[n:]
		if len(f.head) < size {
			break
		}
		if f.startup {
			f.body = int(binary.BigEndian.Uint32(f.head[:4])) - 8
			// Protocol 3.x is the startup message; lower codes (SSL,
			// GSS, cancel requests) are followed by more untyped ones.
			f.startup = binary.BigEndian.Uint32(f.head[4:]) < 3<<16
		} else {
			types = append(types, f.head[0])
			f.body = int(binary.BigEndian.Uint32(f.head[1:])) - 4
		}
		f.head = f.head[:0]
	}
	return types
}

// batches returns one element per batch that starts in chunk: a client's
// first Execute after a Sync.
func (f *framer) batches(chunk []byte) []struct{} {
	var starts []struct{}
	for _, t := range f.types(chunk) {
		switch t {
		case 'E':
			if !f.inBatch {
				starts = append(starts, struct{}{})
			}
			f.inBatch = true
		case 'S':
			f.inBatch = false
		}
	}
	return starts
}

// waitCut returns the message types of the next answer dropped by cutAfter.
func (p *proxy) waitCut(t *testing.T) []byte {
	t.Helper()
	select {
	case types := <-p.cut:
		return types
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy cut no answer")
		return nil
	}
}

// committed fails the test unless an answer the proxy dropped says the
// server ran the batch to its end without an error: it committed, and the
// client never heard.
func committed(t *testing.T, types []byte) {
	t.Helper()
	for _, m := range types {
		if m == 'E' {
			t.Fatalf("the dropped answer %q holds an error: the batch did not commit", types)
		}
	}
}
