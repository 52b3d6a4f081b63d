package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy forwards the TCP connections it accepts on a local address to a
// target address, and injects faults into them on demand. Its methods are
// safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // ended by Close; bounds the dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and one goroutine per connection

	// blackholed is written only with mu held, so that a decision to drop
	// bytes (taken under mu) and Resume's sweep of broken links (under mu)
	// see the same state; it is atomic for the forwarding fast path.
	blackholed atomic.Bool
	accepted   atomic.Int64
	dropped    atomic.Int64

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}

	closeOnce sync.Once
	closeErr  error
}

// Stats is a snapshot of a proxy's counters.
type Stats struct {
	// Accepted is the number of connections accepted since Start.
	Accepted int64
	// Open is the number of accepted connections the proxy holds open: it
	// counts a black-holed connection until Resume, CutAll or Close, even if
	// its client has gone.
	Open int
	// Dropped is the number of bytes read and discarded because the network
	// was black-holed.
	Dropped int64
}

// Start listens on an ephemeral port of 127.0.0.1 and forwards every
// connection it accepts to target: a host:port, or the path of a Unix
// socket (starting with "/", such as PostgreSQL's
// /run/postgresql/.s.PGSQL.5432). It does not dial target until a connection
// arrives, so target may be down.
func Start(target string) (*Proxy, error) {
	if !strings.HasPrefix(target, "/") {
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	if ln.Addr().String() == target {
		// A test that picked a free port for a target that is down can be
		// given that very port: a proxy forwarding to itself would dial
		// itself without end. Take another port while holding this one.
		other, err := net.Listen("tcp", "127.0.0.1:0")
		_ = ln.Close()
		if err != nil {
			return nil, fmt.Errorf("faultproxy: listen: %w", err)
		}
		ln = other
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns dbURL, a postgres:// or postgresql:// connection URL, with its
// host and port replaced by the proxy's address, so that a client given the
// result connects through the proxy. Host and port parameters in the query
// string (host, hostaddr, port) are removed, since they would override it.
func (p *Proxy) URL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		// Not %w of the *url.Error: it would echo the URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("faultproxy: parse database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("faultproxy: database URL scheme is %q, want postgres or postgresql", u.Scheme)
	}
	u.Host = p.Addr()
	if q := u.Query(); q.Has("host") || q.Has("hostaddr") || q.Has("port") {
		q.Del("host")
		q.Del("hostaddr")
		q.Del("port")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.links)
	p.mu.Unlock()
	return Stats{Accepted: p.accepted.Load(), Open: open, Dropped: p.dropped.Load()}
}

// Blackhole makes the network silent until Resume: from its return, no byte
// the proxy reads is forwarded, on existing or new connections, and no
// socket is closed. See the package documentation for what the peers see.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.blackholed.Store(true)
	p.mu.Unlock()
}

// Resume ends a black hole. Connections that lost nothing carry bytes again;
// connections that lost bytes or a close, and those accepted during the
// black hole, are reset (both sides closed with RST) before Resume returns.
// New connections are forwarded normally. Resume without Blackhole does
// nothing.
func (p *Proxy) Resume() {
	var conns []net.Conn
	p.mu.Lock()
	p.blackholed.Store(false)
	for l := range p.links {
		if l.lost.Load() {
			conns = append(conns, p.detachLocked(l)...)
		}
	}
	p.mu.Unlock()
	shut(conns, true)
}

// CutAll resets every current connection, both sides, with RST, as a
// network reset would, before it returns. The proxy keeps listening: a new
// connection works (or is black-holed, if the network is).
func (p *Proxy) CutAll() {
	p.mu.Lock()
	conns := p.detachAllLocked()
	p.mu.Unlock()
	shut(conns, true)
}

// Close stops listening, closes every connection and waits for all the
// proxy's goroutines to end. It returns the error of closing the listener;
// later calls return the same.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.closeErr = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		conns := p.detachAllLocked()
		p.mu.Unlock()
		shut(conns, false)
		p.wg.Wait()
	})
	return p.closeErr
}

// accept runs until Close, handing every connection to a goroutine of its own.
func (p *Proxy) accept() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			// Accept fails transiently, for example when the process is out
			// of file descriptors; back off as net/http does, rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		p.adopt(c)
	}
}

// adopt registers an accepted connection and starts its goroutine: one that
// forwards it or, under a black hole, one that swallows its bytes.
func (p *Proxy) adopt(c net.Conn) {
	p.accepted.Add(1)
	l := &link{client: c}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	held := p.blackholed.Load()
	// A connection accepted under a black hole never reaches the target, so
	// it can never carry its protocol: it is lost from the start.
	l.lost.Store(held)
	p.links[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	if held {
		go p.swallow(l)
	} else {
		go p.forward(l)
	}
}

// detachLocked marks l closed, forgets it and returns its sockets for the
// caller to close once mu is released. p.mu must be held.
func (p *Proxy) detachLocked(l *link) []net.Conn {
	if l.closed {
		return nil
	}
	l.closed = true
	delete(p.links, l)
	if l.server == nil {
		return []net.Conn{l.client}
	}
	return []net.Conn{l.client, l.server}
}

// detachAllLocked detaches every link. p.mu must be held.
func (p *Proxy) detachAllLocked() []net.Conn {
	var conns []net.Conn
	for l := range p.links {
		conns = append(conns, p.detachLocked(l)...)
	}
	return conns
}

// shut closes conns; with reset, it makes each close send an RST rather
// than a FIN, as a connection reset does.
func shut(conns []net.Conn, reset bool) {
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Target returns the address of the PostgreSQL server dbURL names, for Start:
// host:port over TCP, or the server's socket file when the host is a Unix
// socket folder (as the private clusters of internal/pgtest are).
func Target(dbURL string) (string, error) {
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		return "", fmt.Errorf("faultproxy: parse database URL: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port), nil
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// StartFor starts a proxy in front of the server dbURL names and returns it
// with the URL that connects through it.
func StartFor(dbURL string) (*Proxy, string, error) {
	target, err := Target(dbURL)
	if err != nil {
		return nil, "", err
	}
	p, err := Start(target)
	if err != nil {
		return nil, "", err
	}
	u, err := p.URL(dbURL)
	if err != nil {
		_ = p.Close()
		return nil, "", err
	}
	return p, u, nil
}
