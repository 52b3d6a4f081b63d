package faultproxy_test

import (
	"io"
	"net"
	"sync"
)

// echo is a TCP server that writes back what it reads, for tests of the
// proxy's mechanics that need no database. When a client half-closes, it
// closes the connection after echoing everything.
type echo struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startEcho() (*echo, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &echo{ln: ln, conns: make(map[net.Conn]struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c] = struct{}{}
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	return e, nil
}

func (e *echo) Addr() string { return e.ln.Addr().String() }

// closeConns closes every connection the server accepted (a FIN to each).
func (e *echo) closeConns() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.conns {
		_ = c.Close()
	}
}

// Close stops the server and waits for its goroutines.
func (e *echo) Close() {
	_ = e.ln.Close()
	e.closeConns()
	e.wg.Wait()
}
