package main

import "testing"

func TestExtract(t *testing.T) {
	cases := []struct{ name, page, title, text string }{
		{"no title", `<p>just   text</p>`, "", "just text"},
		{"title only in head", `<head><title> A  B </title></head><body><h2>x</h2></body>`, "A B", "A B\n## x"},
		{"inline runs", `<p>a<span>b</span> <i>c</i>d</p>`, "", "ab cd"},
		{"breaks", `<p>one<br>two<br/>three</p>`, "", "one\ntwo\nthree"},
		{"list item with paragraph", `<ul><li><p>first</p></li><li></li><li>second</li></ul>`, "", "- first\n- second"},
		{"headings", `<h1>1</h1><h3>3</h3><h6>6</h6>`, "", "# 1\n### 3\n###### 6"},
		{"page furniture", `<header>Site</header><nav>Menu</nav><p>Body</p><footer>Legal</footer>`, "", "Body"},
		{"article header", `<article><header><h1>Post</h1></header><p>Body</p><footer>By me</footer></article>`, "", "# Post\nBody\nBy me"},
		{"hidden", `<p hidden>a</p><p aria-hidden="TRUE">b</p><p style="display : none">c</p><p style="visibility:hidden">d</p><p>e</p>`, "", "e"},
		{"scripts", `<p>x<script>var y = 1;</script><style>p{}</style><noscript>enable js</noscript><template><p>t</p></template></p>`, "", "x"},
		{"pre keeps lines", "<pre>\n  a\n\n  b  \n</pre><p>c</p>", "", "  a\n\n  b\nc"},
		{"table", `<table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td></td><td>3</td></tr></table>`, "", "k | v\n1 | 3"},
		{"entities", `<p>&lt;tag&gt; &amp; caf&eacute;&nbsp;au&#160;lait</p>`, "", "<tag> & café au lait"},
		{"not html at all", `plain words`, "", "plain words"},
		{"empty", ``, "", ""},
	}
	for _, c := range cases {
		title, text := extract(c.page)
		if title != c.title || text != c.text {
			t.Errorf("%s: %q %q\nwant %q %q", c.name, title, text, c.title, c.text)
		}
	}
}
