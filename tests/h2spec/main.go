// The h2spec command for ScalWS's tests: the conformance suite H2O runs in
// its CI (github.com/summerwind/h2spec, MIT, built from ../shared/tools
// by tools/build-h2spec.sh) driven by a main of our own, since the copy
// there lacks its cmd/ directory. The flags are h2spec's own:
//
//	h2spec -h 127.0.0.1 -p PORT [-t -k] [-P /path] [-o SECONDS] [-v] [SECTION ...]
//
// Exit status 0 when every test passed, 1 when one failed, 2 on a usage error.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/summerwind/h2spec"
	"github.com/summerwind/h2spec/config"
)

func main() {
	host := flag.String("h", "127.0.0.1", "target host")
	port := flag.Int("p", 0, "target port")
	path := flag.String("P", "/", "target path")
	timeout := flag.Int("o", 2, "time to wait for a response, in seconds")
	maxHeader := flag.Int("n", 4000, "the longest header field value the tests send")
	useTLS := flag.Bool("t", false, "connect over TLS (ALPN h2)")
	insecure := flag.Bool("k", false, "do not verify the server's certificate")
	strict := flag.Bool("S", false, "strict mode: the tests of RFC SHOULD requirements too")
	verbose := flag.Bool("v", false, "print each frame")
	junit := flag.String("j", "", "write a JUnit report to this file")
	flag.Parse()
	if *port == 0 {
		fmt.Fprintln(os.Stderr, "h2spec: -p PORT is required")
		os.Exit(2)
	}
	c := &config.Config{
		Host:         *host,
		Port:         *port,
		Path:         *path,
		Timeout:      time.Duration(*timeout) * time.Second,
		MaxHeaderLen: *maxHeader,
		JUnitReport:  *junit,
		Strict:       *strict,
		TLS:          *useTLS,
		Insecure:     *insecure,
		Verbose:      *verbose,
		Sections:     flag.Args(),
	}
	ok, err := h2spec.Run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2spec:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
