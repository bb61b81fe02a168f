# The IAM role of the Kubernetes worker pods (the Helm chart's service
# account): the worker's data access policy of the worker-policy module,
# the one the instance role grants, and nothing of the Auto Scaling group,
# ECR or logs (the cluster's nodes do those). Trusted through IRSA (the
# cluster's OIDC provider, for the one service account) or EKS Pod
# Identity (an association in the cluster), or both.

module "policy" {
  source = "../worker-policy"

  queue_arns              = var.queue_arns
  input_bucket_arn        = var.input_bucket_arn
  input_prefixes          = var.input_prefixes
  output_bucket_arn       = var.output_bucket_arn
  output_prefix           = var.output_prefix
  kms_key_arns            = var.kms_key_arns
  model_repository_s3_uri = var.model_repository_s3_uri
  model_kms_key_arn       = var.model_kms_key_arn
}

locals {
  # The provider's host and path, which IRSA's condition keys are named by.
  oidc_issuer = var.oidc_provider_arn == null ? null : element(split(":oidc-provider/", var.oidc_provider_arn), 1)
}

data "aws_iam_policy_document" "assume" {
  dynamic "statement" {
    for_each = var.oidc_provider_arn == null ? [] : [1]
    content {
      sid     = "ServiceAccountThroughIRSA"
      effect  = "Allow"
      actions = ["sts:AssumeRoleWithWebIdentity"]
      principals {
        type        = "Federated"
        identifiers = [var.oidc_provider_arn]
      }
      condition {
        test     = "StringEquals"
        variable = "${local.oidc_issuer}:sub"
        values   = ["system:serviceaccount:${var.namespace}:${var.service_account}"]
      }
      condition {
        test     = "StringEquals"
        variable = "${local.oidc_issuer}:aud"
        values   = ["sts.amazonaws.com"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.pod_identity_cluster_name == null ? [] : [1]
    content {
      sid     = "ServiceAccountThroughPodIdentity"
      effect  = "Allow"
      actions = ["sts:AssumeRole", "sts:TagSession"]
      principals {
        type        = "Service"
        identifiers = ["pods.eks.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "this" {
  name                 = var.name
  assume_role_policy   = data.aws_iam_policy_document.assume.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags

  lifecycle {
    precondition {
      condition     = var.oidc_provider_arn != null || var.pod_identity_cluster_name != null
      error_message = "Give oidc_provider_arn (IRSA) or pod_identity_cluster_name (EKS Pod Identity): nothing could assume the role."
    }
  }
}

resource "aws_iam_role_policy" "this" {
  name   = "${var.name}-worker"
  role   = aws_iam_role.this.id
  policy = module.policy.json
}

resource "aws_eks_pod_identity_association" "this" {
  count = var.pod_identity_cluster_name == null ? 0 : 1

  cluster_name    = var.pod_identity_cluster_name
  namespace       = var.namespace
  service_account = var.service_account
  role_arn        = aws_iam_role.this.arn
  tags            = var.tags
}
