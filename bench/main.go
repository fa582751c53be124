// Command bench compares the backends and algorithms side by side.
package main

func main() {}
