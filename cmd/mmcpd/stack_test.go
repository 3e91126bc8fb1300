package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// "Is Dune on Plex? If not, request it": the model searches Plex, finds
// nothing, searches Jellyseerr, and asks to request the film; the user
// approves (or not), Jellyseerr gets the request (or nothing), the model
// answers. Real daemon, real plex and seerr plugins; Plex, Jellyseerr and
// Ollama are fakes that record what they are asked. The helpers are
// media_test.go's.

const (
	// stackPlexToken is the X-Plex-Token: it travels as a header only.
	stackPlexToken = "plex-e2e-token-9Qw7Lm2Xv"
	// stackSeerrKey is Jellyseerr's API key: it travels as X-Api-Key.
	stackSeerrKey = "c2VlcnItZTJlLWtleS0wMTIzNDU2Nzg5YWJjZGVm"
)

// stackAside are the requests the tools do not make: the plugins' health
// probes, and plex's now-playing context provider, which runs once per turn.
// The fakes answer them like any request, and the tests leave them out of
// the requests they count.
var stackAside = map[string]bool{"GET /library/sections": true, "GET /api/v1/auth/me": true, "GET /status/sessions": true}

// stackToolRequests are the requests f got from the tools.
func stackToolRequests(f *mediaService) []mediaRequest {
	var out []mediaRequest
	for _, r := range f.requests() {
		if !stackAside[r.Method+" "+r.Path] {
			out = append(out, r)
		}
	}
	return out
}

func stackLines(f *mediaService) []string {
	var out []string
	for _, r := range stackToolRequests(f) {
		out = append(out, r.line())
	}
	return out
}

// stackPlex plays a Plex Media Server that has no Dune (its search answers
// empty hubs) and where nobody watches anything. It answers only the token,
// and only JSON.
func stackPlex(t *testing.T) *mediaService {
	return newMediaService(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if r.Header.Get("X-Plex-Token") != stackPlexToken || r.Header.Get("Accept") != "application/json" {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `<html><head><title>Unauthorized</title></head><body><h1>401 Unauthorized</h1></body></html>`)
			return
		}
		switch r.Method + " " + r.URL.Path {
		case "GET /library/sections":
			io.WriteString(w, `{"MediaContainer":{"size":1,"Directory":[{"key":"1","type":"movie","title":"Films"}]}}`)
		case "GET /status/sessions":
			io.WriteString(w, `{"MediaContainer":{"size":0}}`)
		case "GET /hubs/search":
			io.WriteString(w, `{"MediaContainer":{"size":0,"Hub":[{"title":"Movies","type":"movie","hubIdentifier":"movie","size":0,"more":false,"style":"shelf"},{"title":"Shows","type":"show","hubIdentifier":"show","size":0,"more":false,"style":"shelf"}]}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
}

// stackSeerr plays a Jellyseerr that has never heard of Dune (2021), with
// the seerr plugin's fixtures: the search, the film's details, and the
// request it creates (approved at once: the API key is the owner's).
func stackSeerr(t *testing.T) *mediaService {
	replies := map[string][]byte{
		"GET /api/v1/auth/me":      []byte(`{"id":1,"displayName":"alice","permissions":2}`),
		"GET /api/v1/search":       mediaFixture(t, "../../plugins/seerr/testdata/search_dune.json"),
		"GET /api/v1/movie/438631": mediaFixture(t, "../../plugins/seerr/testdata/movie_438631.json"),
	}
	created := mediaFixture(t, "../../plugins/seerr/testdata/request_created.json")
	return newMediaService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Header.Get("X-Api-Key") != stackSeerrKey {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"status":403,"error":"You do not have permission to access this endpoint"}`)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/request" {
			if !json.Valid(body) || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"message":"request body must be JSON"}`)
				return
			}
			w.WriteHeader(http.StatusCreated)
			w.Write(created)
			return
		}
		if b, ok := replies[r.Method+" "+r.URL.Path]; ok {
			w.Write(b)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"API Not Found"}`)
	})
}

// stack is a daemon with the plex and seerr plugins, wired to fakes; the
// embedded mediaStack lends its HTTP helpers (its tmdb and radarr stay nil).
type stack struct {
	*mediaStack
	plex, seerr *mediaService
}

func startStack(t *testing.T) *stack {
	t.Helper()
	bundled, _ := bundledPlugins(t)
	dir := pluginUserDir(t, false)
	for _, n := range []string{"plex", "seerr"} {
		name := plugins.FilePrefix + n
		src, dst := filepath.Join(bundled, name), filepath.Join(dir, name)
		if os.Link(src, dst) != nil {
			if err := os.WriteFile(dst, mediaFixture(t, src), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &stack{mediaStack: &mediaStack{ollama: ollamatest.New(t)}, plex: stackPlex(t), seerr: stackSeerr(t)}
	s.addr, s.logs, _ = startDaemon(t, []string{
		"MMCP_OLLAMA_HOST=" + s.ollama.URL,
		"MMCP_API_TOKEN=" + canary,
		"MMCP_PLUGINS_DIR=" + dir,
		"MMCP_PLUGIN_PLEX_URL=" + s.plex.URL,
		"MMCP_PLUGIN_PLEX_TOKEN=" + stackPlexToken,
		"MMCP_PLUGIN_SEERR_URL=" + s.seerr.URL,
		"MMCP_PLUGIN_SEERR_API_KEY=" + stackSeerrKey,
	})
	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, s.addr, "/readyz"); return code == 200 }) {
		_, body := apiGet(t, s.addr, "/readyz")
		t.Fatalf("/readyz never 200: %s\nlogs:\n%s", body, s.logs)
	}
	tools := listTools(t, s.addr)
	for name, approval := range map[string]bool{"plex_search": false, "seerr_search": false, "seerr_request": true} {
		tl, ok := tools[name]
		if !ok || tl.Disabled != "" {
			t.Fatalf("%s: listed %v, disabled %q\nlogs:\n%s", name, ok, tl.Disabled, s.logs)
		}
		if tl.NeedsApproval != approval {
			t.Errorf("%s: needs_approval %v, want %v", name, tl.NeedsApproval, approval)
		}
	}
	return s
}

// askForDune runs the first half of every variant: the user asks, the model
// searches Plex (nothing), then Jellyseerr, then asks to request Dune
// (2021); the daemon stops there with an action request. It checks what
// Plex and Jellyseerr got and what the model was told, and that nothing was
// requested yet.
func (s *stack) askForDune(t *testing.T, final ollamatest.Reply) server.ChatResponse {
	t.Helper()
	s.ollama.Push(
		ollamatest.Reply{Content: `{"thought":"Look for Dune on Plex first.","action":"plex_search","args":{"query":"Dune","type":"movie"}}`},
		ollamatest.Reply{Content: `{"thought":"Plex has no Dune; find it on Jellyseerr.","action":"seerr_search","args":{"query":"Dune"}}`},
		ollamatest.Reply{Content: `{"thought":"Dune (2021) is TMDB id 438631 and **not requested**: I request it.","action":"seerr_request","args":{"media_type":"movie","tmdb_id":438631}}`},
		final,
	)
	resp := s.chatResponse(t, "/v1/chat", server.ChatRequest{Message: "Is Dune on Plex? If not, request it."})

	if resp.Type != server.TypeActionRequest || resp.ApprovalID == "" || resp.Answer != "" || resp.SessionID == "" {
		t.Fatalf("chat: want an action request, got %+v", resp)
	}
	if resp.Tool != "seerr_request" {
		t.Errorf("action request tool %q, want seerr_request", resp.Tool)
	}
	mediaJSONEqual(t, "action request args", string(resp.Args), `{"media_type":"movie","tmdb_id":438631}`)
	if want := "Dune (2021) is TMDB id 438631 and not requested: I request it."; resp.Explanation != want {
		t.Errorf("explanation %q, want %q", resp.Explanation, want)
	}
	if len(resp.Steps) != 3 || resp.Steps[0].Action != "plex_search" || resp.Steps[1].Action != "seerr_search" || resp.Steps[2].Action != "seerr_request" ||
		resp.Steps[0].Error != "" || resp.Steps[1].Error != "" || resp.Steps[2].Observation != "" {
		t.Fatalf("steps before the approval: %+v", resp.Steps)
	}
	mediaJSONEqual(t, "plex_search's result", resp.Steps[0].Observation, `{"total":0,"items":[]}`)
	if obs := resp.Steps[1].Observation; !strings.Contains(obs, `{"title":"Dune","type":"movie","year":2021,"tmdb_id":438631,"status":"not requested"`) {
		t.Errorf("seerr_search's result: %s", obs)
	}

	// Plex got exactly the search, with the token as a header and the
	// headers Plex wants of a client; the token is never in the query.
	got := stackToolRequests(s.plex)
	if lines := stackLines(s.plex); !slices.Equal(lines, []string{"GET /hubs/search?limit=10&query=Dune"}) {
		t.Fatalf("Plex got %q, want the one search", lines)
	}
	for h, want := range map[string]string{
		"X-Plex-Token": stackPlexToken, "Accept": "application/json",
		"X-Plex-Client-Identifier": "mmcpd-plugin-plex", "X-Plex-Product": "mmcpd",
	} {
		if v := got[0].Header.Get(h); v != want {
			t.Errorf("Plex search: %s %q, want %q", h, v, want)
		}
	}

	// Jellyseerr got exactly the search, with the key; the request waits
	// for the user.
	got = stackToolRequests(s.seerr)
	if lines := stackLines(s.seerr); !slices.Equal(lines, []string{"GET /api/v1/search?page=1&query=Dune"}) {
		t.Fatalf("Jellyseerr got %q before the approval, want the one search", lines)
	}
	if k := got[0].Header.Get("X-Api-Key"); k != stackSeerrKey {
		t.Errorf("Jellyseerr search: X-Api-Key %q", k)
	}

	// The model was asked three times, each time with the last result, and
	// with what Plex is playing at the end of the prompt.
	reqs := s.ollama.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model was asked %d times before the approval, want 3", len(reqs))
	}
	if !strings.Contains(tailOf(reqs[0]), "\nplex.now_playing: nobody is watching") {
		t.Errorf("the prompt's tail lacks Plex's context line:\n%+v", reqs[0].Messages)
	}
	if obs := lastUserMessage(reqs[1]); obs != "Result of plex_search:\n"+`{"total":0,"items":[]}` {
		t.Errorf("the model was told after plex_search:\n%s", obs)
	}
	if obs := lastUserMessage(reqs[2]); !strings.HasPrefix(obs, "Result of seerr_search:\n") || !strings.Contains(obs, `"tmdb_id":438631`) {
		t.Errorf("the model was told after seerr_search:\n%s", obs)
	}
	return resp
}

// noSecrets checks that neither the Plex token nor the Jellyseerr key
// reached the daemon's log or a response body.
func (s *stack) noSecrets(t *testing.T, bodies ...string) {
	t.Helper()
	for _, key := range []string{stackPlexToken, stackSeerrKey} {
		if strings.Contains(s.logs.String(), key) {
			t.Errorf("a service credential reached the daemon's log")
		}
		for _, b := range bodies {
			if strings.Contains(b, key) {
				t.Errorf("a service credential reached a response: %s", b)
			}
		}
	}
}

func TestStackRequestApproved(t *testing.T) {
	s := startStack(t)
	const answer = "Dune is not on Plex; I requested Dune (2021) on Jellyseerr and it is approved."
	pending := s.askForDune(t, ollamatest.Reply{Content: `{"thought":"Requested.","action":"final_response","args":{"answer":"` + answer + `"}}`})

	approve := server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "approve"}
	resp := s.chatResponse(t, "/v1/chat/respond", approve)
	if resp.Type != server.TypeAnswer || resp.Answer != answer || resp.SessionID != pending.SessionID {
		t.Errorf("respond: %+v", resp)
	}
	const requested = `{"requested":"Dune (2021)","type":"movie","tmdb_id":438631,"request_id":12,"status":"approved"}`
	if len(resp.Steps) != 2 || resp.Steps[0].Action != "seerr_request" || resp.Steps[0].Error != "" || resp.Steps[1].Action != "final_response" {
		t.Fatalf("steps after the approval: %+v", resp.Steps)
	}
	mediaJSONEqual(t, "seerr_request's result", resp.Steps[0].Observation, requested)

	// Jellyseerr: the search, then, only now, the film's details and the
	// one request, with the key and the right body.
	want := []string{"GET /api/v1/search?page=1&query=Dune", "GET /api/v1/movie/438631", "POST /api/v1/request"}
	got := stackToolRequests(s.seerr)
	if lines := stackLines(s.seerr); !slices.Equal(lines, want) {
		t.Fatalf("Jellyseerr got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range got {
		if k := r.Header.Get("X-Api-Key"); k != stackSeerrKey {
			t.Errorf("%s: X-Api-Key %q", r.line(), k)
		}
	}
	mediaJSONEqual(t, "POST /api/v1/request body", got[2].Body, `{"mediaType":"movie","mediaId":438631}`)
	if lines := stackLines(s.plex); len(lines) != 1 {
		t.Errorf("Plex got more after the approval: %q", lines)
	}

	// The model's fourth request carries the request's result.
	reqs := s.ollama.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model was asked %d times, want 4", len(reqs))
	}
	if obs := lastUserMessage(reqs[3]); !strings.HasPrefix(obs, "Result of seerr_request:\n") {
		t.Errorf("the model was told after seerr_request:\n%s", obs)
	} else {
		mediaJSONEqual(t, "the observation of seerr_request", strings.TrimPrefix(obs, "Result of seerr_request:\n"), requested)
	}

	items := mediaWantItems(t, s.session(t, pending.SessionID), "done",
		"user", "tool_call plex_search", "tool_result plex_search", "tool_call seerr_search", "tool_result seerr_search",
		"tool_call seerr_request", "tool_result seerr_request", "assistant")
	if len(items) == 8 {
		mediaJSONEqual(t, "tool_call seerr_request args", string(items[5].Args), `{"media_type":"movie","tmdb_id":438631}`)
		if items[0].Content != "Is Dune on Plex? If not, request it." || items[7].Content != answer || !strings.Contains(items[6].Content, `"request_id":12`) {
			t.Errorf("session items: %+v", items)
		}
	}

	// An approval is used once: a replay requests nothing more.
	code, out := s.post(t, "/v1/chat/respond", approve)
	var e server.ErrorBody
	if code != http.StatusConflict || json.Unmarshal(out, &e) != nil || e.Error.Code != "approval_used" {
		t.Errorf("replayed approval: %d %s", code, out)
	}
	if lines := stackLines(s.seerr); len(lines) != len(want) {
		t.Errorf("Jellyseerr got more after the replay: %q", lines[len(want):])
	}
	_, sessionBody := apiGet(t, s.addr, "/v1/sessions/"+pending.SessionID)
	s.noSecrets(t, string(sessionBody))
}

func TestStackRequestDenied(t *testing.T) {
	s := startStack(t)
	const answer = "All right: Dune is not on Plex, and I did not request it."
	pending := s.askForDune(t, ollamatest.Reply{Content: `{"thought":"The user said no.","action":"final_response","args":{"answer":"` + answer + `"}}`})

	deny := server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "deny"}
	resp := s.chatResponse(t, "/v1/chat/respond", deny)
	if resp.Type != server.TypeAnswer || resp.Answer != answer {
		t.Errorf("respond: %+v", resp)
	}
	if len(resp.Steps) != 2 || resp.Steps[0].Action != "seerr_request" || resp.Steps[0].Error != "the user declined this call" || resp.Steps[0].Observation != "" {
		t.Errorf("steps after the denial: %+v", resp.Steps)
	}
	// Jellyseerr heard only the search: no details, no request.
	if lines := stackLines(s.seerr); !slices.Equal(lines, []string{"GET /api/v1/search?page=1&query=Dune"}) {
		t.Errorf("Jellyseerr got %q although the user said no", lines)
	}

	reqs := s.ollama.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model was asked %d times, want 4", len(reqs))
	}
	const declined = "seerr_request was not run: the user declined it. Do not call it again for this request; answer without it."
	if obs := lastUserMessage(reqs[3]); obs != declined {
		t.Errorf("the model was told after the denial:\n%s\nwant:\n%s", obs, declined)
	}
	mediaWantItems(t, s.session(t, pending.SessionID), "done",
		"user", "tool_call plex_search", "tool_result plex_search", "tool_call seerr_search", "tool_result seerr_search",
		"tool_call seerr_request", "tool_result seerr_request", "assistant")

	// A late approval runs nothing either.
	code, out := s.post(t, "/v1/chat/respond", server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "approve"})
	if code != http.StatusConflict || !strings.Contains(string(out), "approval_used") {
		t.Errorf("approving after the denial: %d %s", code, out)
	}
	if lines := stackLines(s.seerr); len(lines) != 1 {
		t.Errorf("Jellyseerr was called after a late approval: %q", lines)
	}
	s.noSecrets(t)
}
