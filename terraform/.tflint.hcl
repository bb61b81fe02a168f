config {
  call_module_type = "local"
}

plugin "terraform" {
  enabled = true
  preset  = "all"
}
