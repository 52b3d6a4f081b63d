package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/ui"
)

// The UI mounted under /tenure/ of the application's own mux, read-only.
func ExampleNew() {
	pool, schema, closeDB := exampledb.Open() // a pool and a migrated schema
	defer closeDB()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	h, err := ui.New(ui.Config{Operator: op, HidePayloads: true})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tenure/failures", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	// Output:
	// 200 text/html; charset=utf-8
}

// TokenBits counts a token's length times the bits of the smallest
// alphabet its characters come from: 32 hexadecimal digits are 128 bits, a
// word of six letters and digits 31, a repeated one no more than once.
func ExampleTokenBits() {
	fmt.Println(ui.TokenBits("9f86d081884c7d659a2feaa0c55ad015"))
	fmt.Println(ui.TokenBits("s3cret"))
	fmt.Println(ui.TokenBits("s3crets3crets3cret"))
	// Output:
	// 128
	// 31
	// 31
}

// CheckToken says why a token is weak, for a server that would refuse it
// (ui.New only logs it).
func ExampleCheckToken() {
	fmt.Println(ui.CheckToken("9f86d081884c7d659a2feaa0c55ad015"))
	fmt.Println(ui.CheckToken("s3cret"))
	// Output:
	// <nil>
	// the write token (tenure ui --token or $TENURE_UI_TOKEN; ui.Config.Token) has at most 31 bits of entropy, fewer than 128: whoever reaches the UI can guess it (login is throttled, not stopped); use 32 random hexadecimal digits (openssl rand -hex 16), or let tenure ui --write generate one
}

// ListenWarning is what a server listening on its own should print once it
// listens: nothing for a loopback address, what it exposes for any other.
func ExampleListenWarning() {
	fmt.Printf("%q\n", ui.ListenWarning("127.0.0.1:8080"))
	fmt.Println(ui.ListenWarning("0.0.0.0:8080"))
	// Output:
	// ""
	// the UI listens on every network interface, port 8080 (--addr): anyone who can reach it reads every run, failure and payload (--hide-payloads hides the payloads) and can try to guess the write token. Keep the default --addr 127.0.0.1:8080 and reach it through an SSH tunnel, or put it behind an authenticating proxy (--allowed-host names the proxy's host name)
}
