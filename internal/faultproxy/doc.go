// Package faultproxy is a TCP proxy for failure tests: it sits between the
// process under test and a server (PostgreSQL, in Tenure's tests) and breaks
// the network between them on demand, with real sockets, so that the code
// under test meets the faults it meets in production: a partition that goes
// silent, and a connection reset.
//
//	p, err := faultproxy.Start("127.0.0.1:5432")
//	...
//	defer p.Close()
//	url, err := p.URL(os.Getenv("DATABASE_URL")) // connect through the proxy
//
// # Faults
//
// [Proxy.Blackhole] makes the network silent. Bytes are no longer forwarded
// in either direction, on existing connections and on new ones, and no
// socket is closed: the peers see no FIN and no RST, only silence, as behind
// a partition. Bytes read meanwhile are dropped, not buffered, because a
// partition loses them; a FIN or RST from either side is lost the same way.
// The proxy still accepts new connections (like a middlebox that answers
// SYNs) but never dials the target for them, so the server never sees them.
// Bytes the proxy had already read when Blackhole was called may still be
// delivered, like packets already past the cut.
//
// [Proxy.Resume] heals the partition. A connection that lost nothing while
// the network was silent (an idle one) carries bytes again, as an idle TCP
// connection survives a short partition. A connection that lost bytes or a
// close, and every connection accepted during the black hole, is broken for
// its protocol: Resume resets it (closes both sides with RST). Connections
// opened after Resume work normally.
//
// [Proxy.CutAll] resets every current connection at once, both sides, with
// RST; the listener keeps accepting, so the next connection works.
//
// [Proxy.Close] stops listening, closes every connection and returns only
// when all of the proxy's goroutines have ended.
//
// # How a black hole differs from a real partition
//
// The proxy keeps reading while black-holed, so the peers' writes never
// block, however much they send, and TCP keepalive probes are answered by
// the proxy's own kernel: a black-holed connection is never detected by
// keepalive or by a full send buffer, only by the application's own
// timeouts. That is the case a worker must handle anyway.
//
// # pgx and black holes
//
// With pgx v5's default settings (pgconn's DeadlineContextWatcherHandler,
// DeadlineDelay 0) a query on a black-holed connection returns as soon as its
// context ends, within a millisecond or so: the handler sets the socket's
// deadline to now, the read fails with a timeout and pgx reports
// context.DeadlineExceeded. The connection is then closed for the caller, but
// pgx cleans it up in a goroutine of its own that sends a cancel request on a
// new connection (which the proxy accepts and black-holes) and waits for the
// reply until a deadline of 15 seconds; only then is the PgConn's CleanupDone
// closed. pgxpool waits for CleanupDone (up to 15 seconds too) when it
// destroys a connection, so pgxpool.Pool.Close blocks for about 15 seconds
// after a query was lost in a black hole. Resume and Close end that wait at
// once, by resetting or closing the sockets pgx waits on.
package faultproxy
