"""Demo intents: what users ask, in English and Vietnamese, and the fact that answers it.

`paraphrase` turns a template into the messy text real users type: typos, dropped
diacritics, chat slang, fillers and short forms.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rag_loop.text import fold_accents as strip_diacritics


@dataclass(frozen=True)
class Intent:
    name: str
    doc_id: str | None  # None: the knowledge base has no answer (a new, unknown topic)
    fact: str | None
    query_type: str  # policy | faq | security | payment | legal
    risk_level: str  # low | medium | high
    en: tuple[str, ...]
    vi: tuple[str, ...]


def _i(name, doc, fact, qtype, risk, en, vi) -> Intent:
    return Intent(name, doc, fact, qtype, risk, tuple(en), tuple(vi))


INTENTS: list[Intent] = [
    _i("leave_annual", "leave-policy", "annual", "policy", "medium",
       ["How many days of annual leave do I get?", "What is my yearly paid leave allowance?",
        "annual leave days per year?", "how much PTO do full-time staff get"],
       ["Mình được bao nhiêu ngày phép năm?", "Nhân viên chính thức có mấy ngày nghỉ phép một năm?",
        "số ngày phép năm là bao nhiêu", "phép năm được mấy ngày vậy"]),
    _i("leave_carry_over", "leave-policy", "carry_over", "policy", "medium",
       ["Can I carry unused leave over to next year?", "How many leave days roll over?",
        "what happens to my unused vacation days", "carry over leave deadline?"],
       ["Phép chưa dùng có được chuyển sang năm sau không?", "Được chuyển tối đa mấy ngày phép?",
        "ngày phép dư xử lý thế nào", "hạn dùng phép chuyển sang là khi nào"]),
    _i("leave_sick", "leave-policy", "sick", "policy", "medium",
       ["How many sick days do I have?", "Do I need a doctor's note for sick leave?",
        "paid sick leave policy", "sick leave allowance per year"],
       ["Mình có bao nhiêu ngày nghỉ ốm?", "Nghỉ ốm có cần giấy bác sĩ không?",
        "chính sách nghỉ ốm có lương", "nghỉ bệnh được mấy ngày"]),
    _i("leave_parental", "leave-policy", "parental", "policy", "medium",
       ["How long is parental leave?", "Is maternity leave paid?", "parental leave weeks",
        "how many weeks off when I have a baby"],
       ["Nghỉ thai sản được bao lâu?", "Nghỉ chăm con có được hưởng lương không?",
        "nghỉ sinh con mấy tuần", "chế độ thai sản bao nhiêu tuần"]),
    _i("leave_request", "leave-policy", "request", "faq", "low",
       ["How do I request leave?", "Where do I submit a vacation request?",
        "how early must I book time off", "leave request process"],
       ["Đăng ký nghỉ phép thế nào?", "Xin nghỉ phép ở đâu?", "phải xin nghỉ trước mấy ngày",
        "quy trình xin nghỉ phép"]),
    _i("password_rotation", "password-policy", "rotation", "security", "high",
       ["What is the current password rotation policy?", "How often must I change my password?",
        "password expiry period?", "when does my password expire"],
       ["Bao lâu phải đổi mật khẩu một lần?", "Chính sách đổi mật khẩu hiện tại là gì?",
        "mật khẩu hết hạn sau bao nhiêu ngày", "chu kỳ đổi mật khẩu"]),
    _i("password_length", "password-policy", "length", "security", "high",
       ["How long does my password need to be?", "Minimum password length?",
        "how many characters in a password", "password complexity rules"],
       ["Mật khẩu phải dài tối thiểu bao nhiêu ký tự?", "Độ dài mật khẩu tối thiểu?",
        "mật khẩu cần mấy ký tự", "quy định độ dài mật khẩu"]),
    _i("password_reuse", "password-policy", "reuse", "security", "high",
       ["Can I reuse an old password?", "How many previous passwords are blocked?",
        "reuse old password allowed?", "password history rule"],
       ["Có được dùng lại mật khẩu cũ không?", "Không được dùng lại bao nhiêu mật khẩu gần nhất?",
        "dùng lại pass cũ được không", "quy định lịch sử mật khẩu"]),
    _i("pay_err_942", "payment-errors", "err942", "payment", "medium",
       ["What does ERR-PAY-942 mean?", "customer got error ERR-PAY-942", "ERR-PAY-942 fix?",
        "payment failed with code 942"],
       ["Lỗi ERR-PAY-942 là gì?", "khách bị lỗi ERR-PAY-942 thì làm sao", "mã lỗi 942 thanh toán",
        "ERR-PAY-942 xử lý thế nào"]),
    _i("pay_err_101", "payment-errors", "err101", "payment", "medium",
       ["What does ERR-PAY-101 mean?", "error ERR-PAY-101 on checkout", "ERR-PAY-101 meaning",
        "payment code 101 what to do"],
       ["Lỗi ERR-PAY-101 nghĩa là gì?", "khách báo lỗi ERR-PAY-101", "mã 101 khi thanh toán",
        "ERR-PAY-101 là sao"]),
    _i("pay_err_310", "payment-errors", "err310", "payment", "medium",
       ["What is ERR-PAY-310?", "3DS failed ERR-PAY-310", "customer sees ERR-PAY-310",
        "OTP failed error 310"],
       ["ERR-PAY-310 là lỗi gì?", "lỗi xác thực ERR-PAY-310", "khách gặp ERR-PAY-310",
        "lỗi OTP mã 310"]),
    _i("pay_err_555", "payment-errors", "err555", "payment", "medium",
       ["What does ERR-PAY-555 mean?", "was the customer charged twice ERR-PAY-555",
        "duplicate transaction error 555", "ERR-PAY-555?"],
       ["ERR-PAY-555 nghĩa là gì?", "khách có bị trừ tiền hai lần không ERR-PAY-555",
        "lỗi giao dịch trùng 555", "ERR-PAY-555 là sao"]),
    _i("pay_err_700", "payment-errors", "err700", "payment", "medium",
       ["What does ERR-PAY-700 mean?", "which currencies are supported ERR-PAY-700",
        "currency not supported error", "ERR-PAY-700 on foreign card"],
       ["ERR-PAY-700 là lỗi gì?", "hỗ trợ những loại tiền nào", "lỗi loại tiền không hỗ trợ",
        "thẻ nước ngoài bị ERR-PAY-700"]),
    _i("pay_err_977", None, None, "payment", "medium",  # planted surge: not in the knowledge base
       ["What does ERR-PAY-977 mean?", "customers getting ERR-PAY-977 since today",
        "new error ERR-PAY-977?", "payment code 977 help"],
       ["ERR-PAY-977 là lỗi gì?", "hôm nay nhiều khách bị ERR-PAY-977", "lỗi mới ERR-PAY-977",
        "mã lỗi 977 xử lý sao"]),
    _i("contractor_vn_leave", "contractor-rules", "vn_leave", "policy", "medium",
       ["Can Vietnam contractors carry unused leave over?", "What about contractors in VN?",
        "Vietnam contractors leave days?", "Does this apply to contractor Vietnam?"],
       ["Nhà thầu ở Việt Nam có được chuyển phép không?", "nhà thầu VN được nghỉ mấy ngày",
        "quy định nghỉ phép cho contractor Việt Nam", "contractor vn nghỉ phép thế nào"]),
    _i("contractor_sg_leave", "contractor-rules", "sg_leave", "policy", "medium",
       ["How much leave do Singapore contractors get?", "what about SG?",
        "contractor leave in Singapore", "SG contractors carry over?"],
       ["Nhà thầu Singapore được nghỉ bao nhiêu ngày?", "bản cho sg thì sao?",
        "contractor singapore nghỉ phép", "nhà thầu sg chuyển phép được không"]),
    _i("contractor_us_leave", "contractor-rules", "us_leave", "policy", "medium",
       ["Do US contractors get paid leave?", "what about the US version?",
        "contractor time off United States", "US contractor vacation"],
       ["Nhà thầu ở Mỹ có nghỉ phép có lương không?", "còn bên Mỹ thì sao?",
        "contractor Mỹ nghỉ phép", "nhà thầu us có phép không"]),
    _i("contractor_de_leave", "contractor-rules", "de_leave", "policy", "medium",
       ["How many leave days for contractors in Germany?", "and for Germany?",
        "German contractor leave", "DE contractors holidays"],
       ["Nhà thầu ở Đức được nghỉ mấy ngày?", "còn Đức thì sao?", "contractor Đức nghỉ phép",
        "nhà thầu de nghỉ bao nhiêu ngày"]),
    _i("contractor_invoice", "contractor-rules", "invoice", "faq", "low",
       ["When do contractors submit invoices?", "contractor invoice deadline",
        "where do I send my contractor invoice", "invoice due date for vendors"],
       ["Nhà thầu gửi hóa đơn khi nào?", "hạn gửi hóa đơn của contractor", "gửi hóa đơn ở đâu",
        "hạn nộp invoice nhà thầu"]),
    _i("sec_incident", "security-procedures", "incident", "security", "high",
       ["How do I report a security incident?", "I think we have a data breach, who do I tell?",
        "security incident hotline", "report a hack"],
       ["Báo cáo sự cố bảo mật thế nào?", "nghi bị lộ dữ liệu thì báo ai",
        "số hotline sự cố bảo mật", "bị hack thì báo ở đâu"]),
    _i("sec_lost_laptop", "security-procedures", "lost_laptop", "security", "high",
       ["I lost my laptop, what should I do?", "laptop stolen", "report a lost laptop",
        "my work computer was stolen"],
       ["Mình làm mất laptop thì phải làm gì?", "bị mất trộm laptop", "báo mất laptop",
        "máy tính công ty bị mất"]),
    _i("sec_mfa_reset", "security-procedures", "mfa_reset", "security", "high",
       ["How do I reset my MFA?", "lost my phone with the authenticator app", "MFA reset",
        "new phone, 2FA not working"],
       ["Đặt lại MFA như thế nào?", "mất điện thoại có app xác thực", "reset MFA",
        "đổi điện thoại không đăng nhập 2FA được"]),
    _i("sec_phishing", "security-procedures", "phishing", "security", "high",
       ["What do I do with a phishing email?", "I got a suspicious email", "report phishing",
        "clicked a weird link in an email"],
       ["Gặp email lừa đảo thì làm gì?", "nhận được email đáng ngờ", "báo cáo phishing",
        "lỡ bấm link lạ trong email"]),
    _i("sec_classification", "security-procedures", "classification", "security", "high",
       ["Can I store confidential documents on a USB stick?", "where can I save confidential files",
        "confidential data on personal drive?", "data classification rules"],
       ["Có được lưu tài liệu mật vào USB không?", "tài liệu mật lưu ở đâu",
        "lưu file mật trên ổ cá nhân được không", "quy định phân loại dữ liệu"]),
    _i("it_wifi", "it-faq", "wifi", "faq", "low",
       ["What is the office Wi-Fi?", "wifi password?", "how do I connect to wifi",
        "which wifi network should I use"],
       ["Wifi văn phòng là gì?", "mật khẩu wifi", "kết nối wifi thế nào", "dùng mạng wifi nào"]),
    _i("it_vpn", "it-faq", "vpn", "faq", "low",
       ["How do I connect to the VPN?", "VPN setup", "which VPN client do we use",
        "working from home VPN"],
       ["Kết nối VPN thế nào?", "cài VPN", "dùng phần mềm VPN nào", "làm ở nhà vào VPN sao"]),
    _i("it_software", "it-faq", "software", "faq", "low",
       ["How do I request new software?", "install a new app on my laptop",
        "software request approval time", "need a license for a tool"],
       ["Yêu cầu phần mềm mới thế nào?", "cài ứng dụng mới lên laptop", "duyệt phần mềm mất bao lâu",
        "xin license phần mềm"]),
    _i("it_printer", "it-faq", "printer", "faq", "low",
       ["How do I print?", "printer setup", "where is the printer", "print with badge"],
       ["In tài liệu thế nào?", "cài máy in", "máy in ở đâu", "in bằng thẻ nhân viên"]),
    _i("exp_meals", "expense-policy", "meals", "policy", "low",
       ["What is the meal allowance on business trips?", "per diem for food",
        "how much can I spend on meals when travelling", "meal limit Vietnam trip"],
       ["Phụ cấp ăn khi đi công tác là bao nhiêu?", "công tác phí ăn uống", "đi công tác được ăn bao nhiêu tiền",
        "định mức ăn uống công tác VN"]),
    _i("exp_deadline", "expense-policy", "deadline", "policy", "low",
       ["How long do I have to claim expenses?", "expense claim deadline", "late expense report",
        "do I need receipts for expenses"],
       ["Hạn hoàn ứng chi phí là bao lâu?", "deadline nộp chi phí", "nộp chi phí trễ được không",
        "có cần hóa đơn khi hoàn chi phí"]),
    _i("exp_travel", "expense-policy", "travel", "policy", "low",
       ["How do I book business travel?", "can I fly business class", "travel booking tool",
        "flight class policy"],
       ["Đặt vé công tác thế nào?", "được bay hạng thương gia không", "công cụ đặt công tác",
        "quy định hạng vé máy bay"]),
    _i("payroll_payday", "payroll-faq", "payday", "faq", "low",
       ["When is payday?", "what date do we get paid", "salary date", "when is salary paid"],
       ["Ngày nào nhận lương?", "lương trả ngày mấy", "khi nào có lương", "ngày phát lương"]),
    _i("payroll_payslip", "payroll-faq", "payslip", "faq", "low",
       ["Where can I find my payslip?", "download payslip", "see my salary slip", "payslip location"],
       ["Xem phiếu lương ở đâu?", "tải phiếu lương", "bảng lương của mình ở đâu", "phiếu lương"]),
    _i("payroll_tax", "payroll-faq", "tax_form", "faq", "low",
       ["When do I get my tax certificate?", "annual tax form", "tax document for last year",
        "where is my tax certificate"],
       ["Khi nào có chứng từ khấu trừ thuế?", "giấy tờ thuế năm", "chứng từ thuế năm ngoái",
        "lấy chứng từ thuế ở đâu"]),
    _i("office_hours", "office-faq", "hours", "faq", "low",
       ["What are the office hours?", "when does the office open", "office opening times",
        "is the office open on Saturday"],
       ["Văn phòng làm việc giờ nào?", "mấy giờ văn phòng mở cửa", "giờ mở cửa văn phòng",
        "thứ bảy văn phòng có mở không"]),
    _i("office_parking", "office-faq", "parking", "faq", "low",
       ["Where can I park?", "is parking free", "car parking booking", "motorbike parking"],
       ["Gửi xe ở đâu?", "gửi xe có mất phí không", "đặt chỗ đỗ ô tô", "chỗ để xe máy"]),
    _i("office_visitors", "office-faq", "visitors", "faq", "low",
       ["How do I register a visitor?", "guest coming to the office tomorrow", "visitor registration",
        "bring a guest to the office"],
       ["Đăng ký khách đến thăm thế nào?", "mai có khách đến văn phòng", "đăng ký khách",
        "dẫn khách vào văn phòng"]),
    _i("office_holidays", "office-faq", "holidays", "faq", "low",
       ["Is the office open on public holidays?", "how many days off for Tet",
        "holiday calendar", "are we off on 2 September"],
       ["Ngày lễ văn phòng có mở không?", "Tết được nghỉ mấy ngày", "lịch nghỉ lễ",
        "2/9 có được nghỉ không"]),
    _i("legal_nda", "legal-handbook", "nda", "legal", "high",
       ["How do I get an NDA signed?", "customer sent us their NDA", "NDA process",
        "can I sign an NDA myself"],
       ["Ký NDA thế nào?", "khách gửi NDA của họ", "quy trình NDA", "mình tự ký NDA được không"]),
    _i("legal_retention", "legal-handbook", "retention", "legal", "high",
       ["How long do we keep financial records?", "data retention period", "when are records deleted",
        "retention of invoices"],
       ["Hồ sơ tài chính lưu bao lâu?", "thời hạn lưu trữ dữ liệu", "khi nào xóa hồ sơ",
        "lưu hóa đơn bao lâu"]),
    _i("legal_gdpr", "legal-handbook", "gdpr", "legal", "high",
       ["A customer asked for their personal data, what do I do?", "GDPR request deadline",
        "data subject access request", "delete my data request from a user"],
       ["Khách yêu cầu dữ liệu cá nhân thì làm gì?", "hạn trả lời yêu cầu dữ liệu cá nhân",
        "yêu cầu truy cập dữ liệu", "người dùng yêu cầu xóa dữ liệu"]),
]

_EN_SLANG = {"you": "u", "your": "ur", "please": "pls", "what": "wat", "thanks": "thx"}
_VI_SLANG = {"không": "ko", "được": "dc", "mình": "mk", "gì": "j", "như thế nào": "ntn",
             "bao nhiêu": "bn"}
_EN_FILLERS = (("hi, ", ""), ("hey ", ""), ("", " pls"), ("", " thanks"), ("quick q: ", ""))
_VI_FILLERS = (("cho mình hỏi ", ""), ("", " ạ"), ("", " vậy ạ"), ("ad ơi ", ""), ("", " nhé"))


def _typo(text: str, rng: random.Random) -> str:
    positions = [i for i, c in enumerate(text[:-1]) if c.isalpha() and text[i + 1].isalpha()]
    if not positions:
        return text
    i = rng.choice(positions)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:] if rng.random() < 0.5 else text[:i] + text[i + 1:]


def paraphrase(template: str, language: str, rng: random.Random) -> str:
    """A user-typed variant of a template."""
    text = template
    slang = _VI_SLANG if language == "vi" else _EN_SLANG
    for word, short in slang.items():
        if word in text.lower() and rng.random() < 0.3:
            text = text.replace(word, short)
    if rng.random() < 0.3:
        prefix, suffix = rng.choice(_VI_FILLERS if language == "vi" else _EN_FILLERS)
        text = prefix + text[0].lower() + text[1:] + suffix
    if language == "vi" and rng.random() < 0.35:
        text = strip_diacritics(text)
    if rng.random() < 0.25:
        text = text.lower().rstrip("?.")
    if rng.random() < 0.15:
        text = _typo(text, rng)
    return text
