package faultproxy_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/faultproxy"
)

// send writes msg on c and says what came back within 200ms: the echo,
// silence or a reset.
func send(c net.Conn, msg string) string {
	if _, err := c.Write([]byte(msg)); err != nil {
		return outcome(err)
	}
	got, err := readN(c, len(msg), 200*time.Millisecond)
	if err != nil {
		return outcome(err)
	}
	return got
}

// outcome names the network fault behind err.
func outcome(err error) string {
	var nerr net.Error
	switch {
	case errors.As(err, &nerr) && nerr.Timeout():
		return "silence"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	default:
		return err.Error()
	}
}

// A black hole silences a connection without closing it; after Resume, the
// connection that lost bytes is reset and a new one works.
func Example() {
	e, err := startEcho() // a TCP server that writes back what it reads
	if err != nil {
		panic(err)
	}
	defer e.Close()
	p, err := faultproxy.Start(e.Addr())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(send(c, "ping"))

	p.Blackhole()
	fmt.Println(send(c, "ping"))

	p.Resume()
	fmt.Println(send(c, "ping"))

	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c2.Close()
	fmt.Println(send(c2, "ping"))
	// Output:
	// ping
	// silence
	// reset
	// ping
}

// CutAll resets the connections of the moment; the next one works.
func ExampleProxy_CutAll() {
	e, err := startEcho()
	if err != nil {
		panic(err)
	}
	defer e.Close()
	p, err := faultproxy.Start(e.Addr())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(send(c, "ping"))

	p.CutAll()
	fmt.Println(send(c, "ping"))
	fmt.Println(p.Stats().Open, "open")
	// Output:
	// ping
	// reset
	// 0 open
}

// URL points a PostgreSQL connection string at the proxy.
func ExampleProxy_URL() {
	p, err := faultproxy.Start("127.0.0.1:5432")
	if err != nil {
		panic(err)
	}
	defer p.Close()

	u, err := p.URL("postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.Replace(u, p.Addr(), "<proxy>", 1))
	// Output:
	// postgres://postgres@<proxy>/test?sslmode=disable
}
