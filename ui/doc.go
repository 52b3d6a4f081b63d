// Package ui is Tenure's web UI for the people on call: what failed, why and
// since when; what one run did, attempt by attempt, on a time axis; what the
// workers hold; the downstreams of flow control, their limits and breakers;
// and the actions that put things right (requeue, purge, cancel, each
// previewed before it is done; a downstream's limits set or reset, its
// breaker opened or closed), each recorded in the audit log.
//
// New returns an http.Handler to mount in the application's own server, the
// way riverui is mounted:
//
//	h, err := ui.New(ui.Config{Operator: op})
//	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))
//
// or to run on its own with `tenure ui`. Pages are rendered on the server
// from html/template with an embedded style sheet and SVG charts drawn in
// Go: no JavaScript, nothing fetched from elsewhere, every value escaped.
// Links are relative, so the handler works under any prefix. The pages fit
// a 1280-pixel window without scrolling sideways and follow the reader's
// light or dark colour scheme (prefers-color-scheme).
//
// # Pages
//
//	/ and /failures         open failures grouped by fingerprint (workflow,
//	                        activity, reason, error type, message with
//	                        numbers but HTTP status codes, UUIDs and hex IDs
//	                        as placeholders), with counts, first and last
//	                        seen and a chart over time; filters by workflow,
//	                        activity, reason, age, key
//	/runs                   search by ID, key, workflow, status, creation
//	                        time; the runs in flight, by worker
//	/runs/{id}              one run: status, what it waits for, payloads,
//	                        failure, requeue history, parent and children,
//	                        and its timeline (long idle gaps compressed,
//	                        requeues marked)
//	/workers                the worker registry, and queued runs no live
//	                        worker serves (also a banner on every page)
//	/policy?run=ID&step=N   the retry policy recorded on a step, explained
//	/downstreams            each downstream of flow control: its limits,
//	                        what is in use and waiting, its breaker and
//	                        counters (view downstream_status)
//	/downstreams/{name}     one downstream: its breaker's history, its
//	                        limits' changes, the runs waiting on it, and
//	                        with writes the forms that change them
//
// # Safety
//
// The UI is read-only unless Config.Writes is set; it then needs
// Config.Token (sent as "Authorization: Bearer", or as the cookie that
// the login page, or the link /login?token=, sets; a login from another
// site is refused before it is counted) or Config.Authorize (the
// application's own login, which also names who acts). Wrong tokens are
// throttled per client address and for all addresses together
// (throttle.go), and New warns of a token weaker than MinTokenBits;
// ListenWarning says what a UI on a non-loopback address exposes. Every
// write is a POST from the UI's own pages (same-origin Origin or Referer,
// and a double-submit CSRF token compared in constant time); every requeue
// and purge is first a dry run that counts what it will touch, however
// much, breaks it down and lists a sample, and its confirmation is refused
// when that set has changed since; it is then one statement with one audit
// row. A requeue of runs that failed indeterminate, whose
// at-most-once activity runs again, is refused unless the confirmation also
// says, activity by activity, that someone checked its effect did not happen
// (indeterminate.go). A change of a downstream's limits or breaker needs a
// note and goes through the SQL function that makes it (set_downstream,
// reset_downstream, open_breaker, close_breaker), audited as one made in
// SQL is. Requeues, purges and those changes write audit_log rows whose
// note starts with "ui:<who>".
//
// Answers carry a Content-Security-Policy without scripts, X-Frame-Options
// DENY and Cache-Control no-store. The pages read through indexes only (see
// migrations/0007_ui.sql): each answers in well under 200 ms of server time
// with 100,000 open failures and 1,000,000 attempts (docs/design/ui.md).
package ui
