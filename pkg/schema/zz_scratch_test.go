package schema

import (
	"fmt"
	"testing"
)

type scratchArgs struct {
	Query string   `json:"query" jsonschema:"description=What to look for,minLength=1"`
	Kind  string   `json:"kind,omitempty" jsonschema:"enum=movie,enum=tv,default=movie"`
	Year  int      `json:"year,omitempty" jsonschema:"minimum=1900,maximum=2100"`
	IDs   []int    `json:"ids,omitempty"`
	Any   any      `json:"any,omitempty"`
}

func TestScratch(t *testing.T) {
	b, err := Reflect(scratchArgs{})
	fmt.Println(string(b), err)
	u, err := NewUnion([]Tool{{Name: "search", Description: "Search.", Schema: b}})
	fmt.Println(err)
	fmt.Println(string(u.Schema()))
	fmt.Println(string(u.Format()))
	fmt.Println(u.Docs())
	for _, r := range []string{
		`{"thought":"t","action":"search","args":{"query":"x","year":"2010","ids":[1,"a"],"kind":"film"}}`,
		`{"thought":"t","action":"final_response","args":{"answer":""}}`,
		`{"thought":"t","action":"search","args":{"query":"x","year":12345678901234567890}}`,
		`{"thought":"t","action":"search","args" : 
  {"query":"x"}}`,
	} {
		d, err := u.Decode(r)
		fmt.Printf("%+v %v\n", d, err)
	}
}
