// Package browser holds the browser test of package ui: a headless Chromium,
// driven by chromedp, clicks through the web UI the way an on-call engineer
// does (find a failed run, look at its timeline, requeue it with a note,
// spot a workflow no worker serves, requeue payments whose at-most-once
// attempt was lost only once they are checked) against a real worker on a
// real PostgreSQL schema, and saves a screenshot of every page to docs/ui.
//
// It is a module of its own so that chromedp is never a requirement of the
// core module (internal/coremodule). Its test needs Chromium: on Debian,
// apt-get install -y chromium chromium-driver ($CHROMIUM names another
// binary). A machine without it fails the test, saying so; it never skips.
package browser
