package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

func main() {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("fake got", r.Method, r.URL.RequestURI(), "key:", r.Header.Get("X-Api-Key"))
		w.Write([]byte(`{"totalRecords":1,"records":[{"title":"X.S01E01","size":10,"sizeleft":5,"timeleft":"00:01:00","status":"downloading","trackedDownloadStatus":"ok","trackedDownloadState":"downloading","series":{"title":"X"},"episode":{"seasonNumber":1,"episodeNumber":1}}]}`))
	}))
	defer ts.Close()
	h, err := plugins.New(plugins.Options{Dir: "/tmp/e2e/plugins", Environ: []string{"PATH=/usr/bin", "MMCP_PLUGIN_SONARR_URL=" + ts.URL, "MMCP_PLUGIN_SONARR_API_KEY=abcdefgh1234", "MMCP_PLUGIN_RADARR_URL=nope"},
		StartTimeout: 10 * time.Second, KillGrace: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	h.Start(context.Background())
	<-h.Started()
	for _, t := range h.Tools() {
		fmt.Println(t.Name, "approval:", t.NeedsApproval, "disabled:", t.Disabled)
	}
	out, err := h.Call(context.Background(), "sonarr_queue", []byte(`{}`))
	fmt.Println(out, err)
}
