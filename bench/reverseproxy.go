// A plain Go reverse proxy, a peer of the router in bench/router.py: net/http/httputil.ReverseProxy
// with every write flushed at once (as an SSE relay needs) and a keep-alive pool to the upstream.
//
//	go build -o ~/.cache/specpilot/bench/reverseproxy bench/reverseproxy.go
//	reverseproxy LISTEN_ADDR UPSTREAM_URL
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: reverseproxy LISTEN_ADDR UPSTREAM_URL")
	}
	target, err := url.Parse(os.Args[2])
	if err != nil {
		log.Fatalf("upstream URL: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.Transport = &http.Transport{
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	server := &http.Server{Addr: os.Args[1], Handler: proxy, ReadHeaderTimeout: 30 * time.Second}
	log.Fatal(server.ListenAndServe())
}
