"""The demo knowledge base: versioned company documents, each fact in English and Vietnamese.

A fact is one chunk per language (`<doc>@<version>#<fact>-<lang>`). Versions carry the
times that define freshness: `source_updated_at` (the source changed) and `indexed_at`
(the change reached the index).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocVersion:
    doc_id: str
    version: str
    title: str
    source_updated_at: str
    indexed_at: str
    facts: dict[str, tuple[str, str]]  # fact key -> (English, Vietnamese)

    def chunk_id(self, fact: str, language: str) -> str:
        return f"{self.doc_id}@{self.version}#{fact}-{language}"


_LEAVE_2025 = {
    "annual": ("Full-time employees get 12 days of paid annual leave per year.",
               "Nhân viên toàn thời gian có 12 ngày nghỉ phép năm có lương mỗi năm."),
    "carry_over": ("Up to 5 unused leave days can be carried over until 31 March of the next year.",
                   "Tối đa 5 ngày phép chưa dùng được chuyển sang năm sau, dùng trước ngày 31 tháng 3."),
    "sick": ("Employees get 10 days of paid sick leave per year; a doctor's note is needed after 2 days.",
             "Nhân viên có 10 ngày nghỉ ốm có lương mỗi năm; nghỉ quá 2 ngày cần giấy bác sĩ."),
    "parental": ("Parental leave is 16 weeks fully paid.",
                 "Nghỉ thai sản và chăm con là 16 tuần hưởng nguyên lương."),
    "request": ("Leave is requested in the HR portal at least 3 working days in advance.",
                "Đăng ký nghỉ phép trên cổng HR trước ít nhất 3 ngày làm việc."),
}
_LEAVE_2026 = {
    **_LEAVE_2025,
    "annual": ("Full-time employees get 15 days of paid annual leave per year.",
               "Nhân viên toàn thời gian có 15 ngày nghỉ phép năm có lương mỗi năm."),
    "carry_over": ("Up to 7 unused leave days can be carried over until 30 June of the next year.",
                   "Tối đa 7 ngày phép chưa dùng được chuyển sang năm sau, dùng trước ngày 30 tháng 6."),
    "parental": ("Parental leave is 20 weeks fully paid.",
                 "Nghỉ thai sản và chăm con là 20 tuần hưởng nguyên lương."),
}
_PASSWORD_2024 = {
    "rotation": ("Passwords must be changed every 180 days.",
                 "Mật khẩu phải được đổi sau mỗi 180 ngày."),
    "length": ("Passwords must have at least 10 characters.",
               "Mật khẩu phải có ít nhất 10 ký tự."),
    "reuse": ("You cannot reuse any of your last 5 passwords.",
              "Không được dùng lại 5 mật khẩu gần nhất."),
}
_PASSWORD_2026 = {
    "rotation": ("Passwords must be changed every 90 days.",
                 "Mật khẩu phải được đổi sau mỗi 90 ngày."),
    "length": ("Passwords must have at least 14 characters.",
               "Mật khẩu phải có ít nhất 14 ký tự."),
    "reuse": ("You cannot reuse any of your last 10 passwords.",
              "Không được dùng lại 10 mật khẩu gần nhất."),
}

DOCUMENTS: list[DocVersion] = [
    DocVersion("leave-policy", "2025", "Leave policy 2025", "2025-01-01T00:00:00Z",
               "2025-01-01T00:20:00Z", _LEAVE_2025),
    DocVersion("leave-policy", "2026", "Leave policy 2026", "2026-11-03T09:00:00Z",
               "2026-11-03T09:10:00Z", _LEAVE_2026),
    DocVersion("password-policy", "2024", "Password rotation policy 2024", "2024-03-01T00:00:00Z",
               "2024-03-01T00:05:00Z", _PASSWORD_2024),
    # planted freshness lag: published 09:00, reached the index only at 15:30
    DocVersion("password-policy", "2026", "Password rotation policy 2026", "2026-11-11T09:00:00Z",
               "2026-11-11T15:30:00Z", _PASSWORD_2026),
    DocVersion("payment-errors", "2026.10", "Payment error codes", "2026-10-01T00:00:00Z",
               "2026-10-01T00:10:00Z", {
        "err942": ("ERR-PAY-942 means the card issuer declined the payment; the customer must contact their bank.",
                   "ERR-PAY-942 nghĩa là ngân hàng phát hành thẻ từ chối giao dịch; khách hàng cần liên hệ ngân hàng."),
        "err101": ("ERR-PAY-101 means insufficient funds; ask the customer to top up or use another card.",
                   "ERR-PAY-101 nghĩa là tài khoản không đủ tiền; khách cần nạp thêm hoặc dùng thẻ khác."),
        "err310": ("ERR-PAY-310 means 3-D Secure verification failed; the customer should retry and confirm the OTP.",
                   "ERR-PAY-310 nghĩa là xác thực 3-D Secure thất bại; khách cần thử lại và nhập đúng mã OTP."),
        "err555": ("ERR-PAY-555 means a duplicate transaction was blocked; no money was taken twice.",
                   "ERR-PAY-555 nghĩa là giao dịch trùng bị chặn; khách không bị trừ tiền hai lần."),
        "err700": ("ERR-PAY-700 means the currency is not supported; only VND, USD and SGD are accepted.",
                   "ERR-PAY-700 nghĩa là loại tiền không được hỗ trợ; chỉ chấp nhận VND, USD và SGD."),
    }),
    DocVersion("contractor-rules", "2026", "Contractor rules by country", "2026-01-15T00:00:00Z",
               "2026-01-15T00:10:00Z", {
        "vn_leave": ("Contractors in Vietnam get 12 days of leave and cannot carry unused days over.",
                     "Nhà thầu tại Việt Nam có 12 ngày nghỉ và không được chuyển ngày phép chưa dùng sang năm sau."),
        "sg_leave": ("Contractors in Singapore get 14 days of leave and can carry over up to 5 days.",
                     "Nhà thầu tại Singapore có 14 ngày nghỉ và được chuyển tối đa 5 ngày sang năm sau."),
        "us_leave": ("Contractors in the United States have no paid leave; time off is unbilled.",
                     "Nhà thầu tại Mỹ không có nghỉ phép có lương; thời gian nghỉ không được tính phí."),
        "de_leave": ("Contractors in Germany get 20 days of leave under their framework contract.",
                     "Nhà thầu tại Đức có 20 ngày nghỉ theo hợp đồng khung."),
        "invoice": ("Contractors submit invoices by the 5th of each month through the vendor portal.",
                    "Nhà thầu gửi hóa đơn trước ngày 5 hằng tháng qua cổng nhà cung cấp."),
    }),
    DocVersion("security-procedures", "2026", "Security procedures", "2026-02-01T00:00:00Z",
               "2026-02-01T00:10:00Z", {
        "incident": ("Report a security incident to security@company.example within 1 hour or call hotline 1919.",
                     "Báo cáo sự cố bảo mật tới security@company.example trong vòng 1 giờ hoặc gọi đường dây nóng 1919."),
        "lost_laptop": ("A lost or stolen laptop must be reported within 24 hours so IT can wipe it remotely.",
                        "Mất laptop phải báo trong vòng 24 giờ để IT xóa dữ liệu từ xa."),
        "mfa_reset": ("To reset MFA, book a video call with the IT helpdesk to verify your identity.",
                      "Để đặt lại MFA, đặt lịch gọi video với IT helpdesk để xác minh danh tính."),
        "phishing": ("Forward suspected phishing emails to phishing@company.example and do not click links.",
                     "Chuyển tiếp email nghi lừa đảo tới phishing@company.example và không bấm vào liên kết."),
        "classification": ("Confidential documents must never be stored on personal drives or USB sticks.",
                           "Tài liệu mật không bao giờ được lưu trên ổ cá nhân hoặc USB."),
    }),
    DocVersion("it-faq", "2026", "IT FAQ", "2026-03-01T00:00:00Z", "2026-03-01T00:10:00Z", {
        "wifi": ("Connect to the CORP-5G Wi-Fi network; the password is in the IT portal.",
                 "Kết nối Wi-Fi CORP-5G; mật khẩu Wi-Fi có trên cổng IT."),
        "vpn": ("Install the GlobalProtect client and sign in with your company account to use the VPN.",
                "Cài GlobalProtect và đăng nhập bằng tài khoản công ty để dùng VPN."),
        "software": ("Request new software through the IT service catalog; approval takes 2 days.",
                     "Yêu cầu phần mềm mới qua danh mục dịch vụ IT; duyệt mất 2 ngày."),
        "printer": ("Printers are added automatically; print with your badge at any floor printer.",
                    "Máy in được thêm tự động; quẹt thẻ nhân viên tại máy in ở bất kỳ tầng nào để in."),
    }),
    DocVersion("expense-policy", "2026", "Expense policy", "2026-01-01T00:00:00Z",
               "2026-01-01T00:10:00Z", {
        "meals": ("The meal allowance on business trips is 25 USD per day, or 500,000 VND in Vietnam.",
                  "Phụ cấp ăn khi đi công tác là 25 USD mỗi ngày, hoặc 500.000 đồng tại Việt Nam."),
        "deadline": ("Expenses must be claimed within 30 days with receipts attached.",
                     "Chi phí phải được yêu cầu hoàn trong vòng 30 ngày kèm hóa đơn."),
        "travel": ("Business travel is booked through Navan; economy class for flights under 6 hours.",
                   "Đặt công tác qua Navan; bay hạng phổ thông cho chuyến dưới 6 tiếng."),
    }),
    DocVersion("payroll-faq", "2026", "Payroll FAQ", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", {
        "payday": ("Salaries are paid on the 25th of each month, or the previous working day.",
                   "Lương được trả vào ngày 25 hằng tháng, hoặc ngày làm việc liền trước."),
        "payslip": ("Payslips are available in the HR portal under My Pay.",
                    "Phiếu lương có trên cổng HR, mục Lương của tôi."),
        "tax_form": ("The annual tax certificate is issued by 31 January in the HR portal.",
                     "Chứng từ khấu trừ thuế năm được phát hành trước 31 tháng 1 trên cổng HR."),
    }),
    DocVersion("office-faq", "2026", "Office FAQ", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", {
        "hours": ("The office is open from 8:30 to 17:30, Monday to Friday.",
                  "Văn phòng mở cửa từ 8:30 đến 17:30, thứ Hai đến thứ Sáu."),
        "parking": ("Motorbike parking is free in basement B2; car parking must be booked.",
                    "Gửi xe máy miễn phí ở tầng hầm B2; đỗ ô tô phải đặt trước."),
        "visitors": ("Visitors must be registered at reception one day in advance.",
                     "Khách đến thăm phải được đăng ký ở lễ tân trước một ngày."),
        "holidays": ("The office is closed on public holidays, including Tet (5 days) and 2 September.",
                     "Văn phòng nghỉ các ngày lễ, gồm Tết (5 ngày) và ngày 2 tháng 9."),
    }),
    DocVersion("legal-handbook", "2026", "Legal handbook", "2026-01-01T00:00:00Z",
               "2026-01-01T00:10:00Z", {
        "nda": ("NDAs are requested and signed through the legal portal; never sign a customer's NDA yourself.",
                "NDA được yêu cầu và ký qua cổng pháp chế; không tự ký NDA của khách hàng."),
        "retention": ("Financial records are kept for 7 years, then deleted.",
                      "Hồ sơ tài chính được lưu 7 năm rồi xóa."),
        "gdpr": ("A personal data request must be answered within 30 days; forward it to privacy@company.example.",
                 "Yêu cầu về dữ liệu cá nhân phải được trả lời trong 30 ngày; chuyển tới privacy@company.example."),
    }),
]


def newest_versions(at_iso: str, by: str) -> dict[str, DocVersion]:
    """Per doc_id, the newest version whose `by` time (source_updated_at or indexed_at) <= at."""
    newest: dict[str, DocVersion] = {}
    for doc in sorted(DOCUMENTS, key=lambda d: getattr(d, by)):
        if getattr(doc, by) <= at_iso:
            newest[doc.doc_id] = doc
    return newest
