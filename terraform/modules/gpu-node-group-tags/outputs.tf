output "tags" {
  description = "The tags put on each group: cluster-autoscaler's node template (labels, nvidia.com/gpu replicas, taint) and, with cluster_name, its auto-discovery tags."
  value       = local.tags
}
