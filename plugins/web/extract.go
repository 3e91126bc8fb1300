package main

import (
	"bytes"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// extract reduces an HTML page to what a person reads on it: the title on
// the first line, then one line per heading ("## Heading"), paragraph, list
// item ("- item") or table row ("cell | cell"), with the page's furniture
// (scripts, styles, navigation, banners, hidden parts) left out.
func extract(page string) (title, text string) {
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil { // html.Parse fails only when reading fails
		return "", page
	}
	title = collapse(textOf(find(doc, atom.Title)))
	e := &extractor{}
	if title != "" {
		e.lines = append(e.lines, title)
	}
	if body := find(doc, atom.Body); body != nil {
		e.walk(body)
	}
	e.flush()
	return title, strings.Join(e.lines, "\n")
}

// skipped elements hold no reading matter.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Nav: true, atom.Svg: true, atom.Iframe: true, atom.Object: true,
	atom.Embed: true, atom.Canvas: true, atom.Button: true, atom.Select: true,
	atom.Head: true, atom.Dialog: true,
}

// blocks start and end a line.
var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true,
	atom.Aside: true, atom.Blockquote: true, atom.Figure: true, atom.Figcaption: true,
	atom.Table: true, atom.Tr: true, atom.Ul: true, atom.Ol: true, atom.Dl: true, atom.Dt: true,
	atom.Dd: true, atom.Form: true, atom.Fieldset: true, atom.Address: true, atom.Details: true,
	atom.Summary: true, atom.Hr: true, atom.Center: true, atom.Caption: true, atom.Header: true,
	atom.Footer: true, atom.Body: true,
}

var headings = map[atom.Atom]string{
	atom.H1: "# ", atom.H2: "## ", atom.H3: "### ", atom.H4: "#### ", atom.H5: "##### ", atom.H6: "###### ",
}

type extractor struct {
	lines  []string
	cur    bytes.Buffer
	prefix string // for the next line: a heading's hashes, a list item's dash
	inPre  int
	inMain int // inside article or main, where header and footer belong to the text
}

func (e *extractor) walk(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		e.cur.WriteString(n.Data)
		return
	case html.ElementNode:
	default:
		e.children(n)
		return
	}
	a := n.DataAtom
	if skipped[a] || hidden(n) || ((a == atom.Header || a == atom.Footer) && e.inMain == 0) {
		return
	}
	switch {
	case a == atom.Br:
		e.flush()
	case headings[a] != "":
		e.line(headings[a], n)
	case a == atom.Li:
		e.line("- ", n)
	case a == atom.Pre:
		e.flush()
		e.inPre++
		e.children(n)
		e.inPre--
		e.flushPre()
	case a == atom.Td || a == atom.Th:
		// Cells are joined with " | "; an empty one leaves no trace.
		before := e.cur.Len()
		if len(bytes.TrimSpace(e.cur.Bytes())) > 0 {
			e.cur.WriteString(" | ")
		}
		mark := e.cur.Len()
		e.children(n)
		if e.cur.Len() >= mark && len(bytes.TrimSpace(e.cur.Bytes()[mark:])) == 0 {
			e.cur.Truncate(before)
		}
	case a == atom.Article || a == atom.Main:
		e.flush()
		e.inMain++
		e.children(n)
		e.inMain--
		e.flush()
	case blocks[a]:
		e.flush()
		e.children(n)
		e.flush()
	default:
		e.children(n)
	}
}

func (e *extractor) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		e.walk(c)
	}
}

// line puts n on lines of its own, the first marked with prefix.
func (e *extractor) line(prefix string, n *html.Node) {
	e.flush()
	e.prefix = prefix
	e.children(n)
	e.flush()
	e.prefix = ""
}

// flush ends the current line. An empty one keeps the prefix for the next,
// so that <li><p>text</p></li> still reads "- text".
func (e *extractor) flush() {
	if e.inPre > 0 {
		return
	}
	s := collapse(e.cur.String())
	e.cur.Reset()
	if s == "" {
		return
	}
	e.lines = append(e.lines, e.prefix+s)
	e.prefix = ""
}

// flushPre ends preformatted text, whose line breaks and indentation are
// its meaning.
func (e *extractor) flushPre() {
	if e.inPre > 0 {
		return
	}
	s := strings.Trim(e.cur.String(), "\n")
	e.cur.Reset()
	for l := range strings.SplitSeq(s, "\n") {
		e.lines = append(e.lines, strings.TrimRight(l, " \t\r"))
	}
}

// hidden is an element the page does not show.
func hidden(n *html.Node) bool {
	for _, at := range n.Attr {
		switch {
		case at.Key == "hidden":
			return true
		case at.Key == "aria-hidden" && strings.EqualFold(at.Val, "true"):
			return true
		case at.Key == "style":
			s := strings.ToLower(strings.Join(strings.Fields(at.Val), ""))
			if strings.Contains(s, "display:none") || strings.Contains(s, "visibility:hidden") {
				return true
			}
		}
	}
	return false
}

// find is the first element a in n's tree.
func find(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, a); f != nil {
			return f
		}
	}
	return nil
}

// textOf is all the text inside n.
func textOf(n *html.Node) string {
	if n == nil {
		return ""
	}
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(textOf(c))
	}
	return b.String()
}

// collapse turns every run of white space into one space.
func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }
